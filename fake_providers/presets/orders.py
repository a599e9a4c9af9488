"""``orders``: a PayPal-like API keyed by ``PayPal-Request-Id``, with 409 while in flight.

Follows PayPal's REST idempotency (https://developer.paypal.com/api/rest/reference/idempotency/):

- The client sends a request id in the ``PayPal-Request-Id`` header; PayPal keeps it for a
  retention period that depends on the API (6 hours for Orders, up to 72 hours for others).
  Here: ``window_s``, 6 h by default, accepted up to 72 h, on the provider clock. This fake
  requires the header (400 without it).
- A repeat of a *completed* request with the same id, within the retention period, does not
  create a second order: PayPal answers with the original resource. Here: the original body
  is replayed with status 200 (the first answer was 201 Created), logged ``deduplicated``.
  PayPal does not compare the bodies of the two requests; neither does this preset (the
  repeat's payload hash is logged, the original order is returned).
- A repeat that arrives while the first request with that id is *still being processed* is
  refused with 409 (logged ``rejected``, status 409) and changes nothing; the client should
  retry later. Make the first request linger with a ``slow`` fault to see it. The switch
  ``in_flight_conflict=false`` serialises such repeats instead.
- Ids are scoped to the caller (credential). After the retention period the same id
  creates a new order, logged ``expired_then_accepted``.
- After a timeout the worker can look the request up: ``GET /v1/messages?request_id=ID``
  (``idempotency_key=`` is accepted too): 200 with the order, 404 if none. ``lookup=false``
  turns it off.
- The wire: PayPal's ``POST /v2/checkout/orders`` (JSON ``{"intent", "purchase_units":
  [{"reference_id", "amount", "payee": {"merchant_id" | "email_address"}}]}``) with the
  ``PayPal-Request-Id`` header, and the harness's ``POST /v1/messages``. The destination is
  the first purchase unit's payee (merchant id, else e-mail), the user's own id its
  ``reference_id`` (see ``Identify``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt
from fake_providers._identify import Identify
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._options import seconds, switch
from fake_providers._preset import Core, PresetSpec
from fake_providers._reply import Reply, json_response, raw_json
from fake_providers._routing import Route

MAX_WINDOW_S = 72 * 3600.0

CONFLICT = {
    "name": "RESOURCE_CONFLICT",
    "message": "A request with this PayPal-Request-Id is still being processed.",
}


class Orders(MessagePreset):
    """PayPal-like request ids: replay when done, 409 while in flight, lookup by id."""

    name = "orders"
    key_header = "PayPal-Request-Id"
    missing_key_error = "missing PayPal-Request-Id header"

    def __init__(self, core: Core, options: Mapping[str, Any]) -> None:
        super().__init__(core, options)
        self._busy: set[tuple[str | None, str]] = set()

    @property
    def key_required(self) -> bool:
        return True

    def extra_routes(self) -> list[Route]:
        return [
            Route("/v1/messages", ("GET",), self.lookup),
            Route("/v2/checkout/orders", ("POST",), self.core.handle_message),
        ]

    def admit(self, incoming: Incoming) -> Reply | None:
        busy = (incoming.attempt.credential_id, incoming.key)
        if busy in self._busy and self.options["in_flight_conflict"]:
            return self.core.record(
                incoming.attempt,
                outcome="rejected",
                status=409,
                payload=CONFLICT,
                headers={"PayPal-Request-Id": incoming.key},
                fault=incoming.fault_name,
            )
        self._busy.add(busy)
        return None

    def release(self, incoming: Incoming) -> None:
        self._busy.discard((incoming.attempt.credential_id, incoming.key))

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        echo = {"PayPal-Request-Id": incoming.key}
        now = core.now()
        prior = core.log.find_acceptance(
            epoch=core.epoch, credential_id=attempt.credential_id, idempotency_key=incoming.key
        )
        if prior is not None and now - prior.effect.received_at < self.options["window_s"]:
            core.append(
                attempt,
                outcome="deduplicated",
                status=200,
                provider_message_id=prior.effect.provider_message_id,
                fault=incoming.fault_name,
                received_at=now,
            )
            return Reply(raw_json(200, prior.response_body, echo))
        order_id = core.mint_id(attempt, "ORD-").upper()
        body = json.dumps(
            {"id": order_id, "status": "CREATED", "destination": incoming.destination},
            separators=(",", ":"),
        )
        return core.record(
            attempt,
            outcome="fresh" if prior is None else "expired_then_accepted",
            status=201,
            payload=body,
            headers=echo,
            fault=incoming.fault_name,
            provider_message_id=order_id,
            save=True,
        )

    def lookup(self, request: Request) -> Reply:
        """GET /v1/messages?request_id=ID: the caller's order created with that request id."""
        core = self.core
        if not self.options["lookup"]:
            return Reply(json_response(404, {"error": "not found"}))
        key = request.args.get("request_id") or request.args.get("idempotency_key") or None
        credential = core.bearer_credential(request)
        with core.lock:
            if credential is None:
                attempt = Attempt(idempotency_key=key)
                payload = {"error": "unauthenticated"}
                return core.record(attempt, outcome="unauthenticated", status=401, payload=payload)
            if key is None:
                return Reply(json_response(400, {"error": "missing request_id parameter"}))
            found = core.log.find_acceptance(
                epoch=core.epoch, credential_id=credential.credential_id, idempotency_key=key
            )
        if found is None:
            return Reply(json_response(404, {"error": "not found"}))
        effect = found.effect
        answer = {
            "id": effect.provider_message_id,
            "status": "CREATED",
            "destination": effect.destination,
            "run_id": effect.run_id,
            "request_id": effect.idempotency_key,
        }
        return Reply(json_response(200, answer))


def _build(core: Core, options: Mapping[str, Any]) -> Orders:
    return Orders(core, options)


SPEC = PresetSpec(
    name="orders",
    models="PayPal-like orders API (PayPal-Request-Id, 409 while in flight)",
    options=(
        seconds(
            "window_s",
            default=6 * 3600,
            help="how long a request id is kept (at most 72 h)",
            maximum=MAX_WINDOW_S,
        ),
        switch("lookup", default=True, help="serve GET /v1/messages?request_id="),
        switch("in_flight_conflict", default=True, help="answer 409 to a repeat in flight"),
    ),
    factory=_build,
    identify=Identify.of(
        run=["json:/run_id", "header:X-Run-Id"],
        destination=[
            "json:/destination",
            "json:/purchase_units/0/payee/merchant_id",
            "json:/purchase_units/0/payee/email_address",
        ],
        delivery=[
            "json:/delivery_id",
            "json:/purchase_units/0/reference_id",
            "json:/purchase_units/0/custom_id",
            "header:X-Delivery-Id",
        ],
        recognizer=["json:/recognizer", r"regex:ch-[0-9a-f]{12}"],
    ),
)
