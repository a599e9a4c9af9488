"""``payments``: a Stripe-like API with idempotency keys, a 24 h window, replay and lookup.

Follows Stripe's documented idempotent requests (https://docs.stripe.com/api/idempotent_requests):

- The key travels in the ``Idempotency-Key`` header and is scoped to the account (here: the
  credential). Stripe makes the header optional; this fake requires it (400 without), since a
  delivery worker that sends without one cannot be judged.
- Stripe "saves the resulting status code and body of the first request made for any given
  idempotency key, regardless of whether it succeeds or fails", and later requests with the
  key "return the same result". Here the first accepted reply, or the first *decline* (402
  for a destination matching the ``decline`` globs: the endpoint ran and said no), is saved
  and replayed byte for byte with ``Idempotent-Replayed: true``, logged ``deduplicated``.
- "Results are only saved if an API endpoint started executing": a request that failed
  validation (400, 403), was refused for reusing a key with different parameters (422 here),
  or failed in front of the endpoint (an injected ``status`` fault: 5xx, 429) saves nothing,
  so a retry with the same key is processed afresh.
- "The idempotency layer compares incoming parameters to those of the original request and
  errors unless they're the same": same key with a different payload hash is answered
  ``mismatch_status`` (422 by default) and logged ``rejected``.
- Keys are forgotten once they are ``window_s`` old (Stripe: "at least 24 hours"), measured
  on the provider clock; a repeat after that is a new charge, logged
  ``expired_then_accepted``.
- After a timeout the worker can ask ``GET /v1/messages?idempotency_key=K``: 200 with the
  accepted message (its own tenant's only), 404 if the key never produced an effect. Real
  Stripe has no such endpoint (one would list objects by metadata); the switch ``lookup``
  turns it off (404).

- The wire: Stripe's own ``POST /v1/<resource>`` (``/v1/charges``, ``/v1/payment_intents``,
  ...) with a form body (``application/x-www-form-urlencoded``, what Stripe's API takes:
  ``amount=2000&currency=usd&customer=cus_1&metadata[order_id]=42``) or JSON, and the
  harness's ``POST /v1/messages``. The endpoint is part of the parameters compared for a
  reused key (Stripe: a key "re-used on a request that does not match the first request's
  API endpoint and parameters" is an ``idempotency_error``). On Stripe routes errors take
  Stripe's shape ``{"error": {"type", "message"}}``, and a reused key is answered 400 with
  Stripe's own message, as stripe/stripe-ruby#503 quotes it (``mismatch_status`` governs
  ``/v1/messages`` only); the ``reason`` names the parameters that differ from the first
  request. The destination is read from ``destination``, then
  ``customer``, then ``transfer_data[destination]``; run and delivery from the harness
  fields or ``metadata[run_id]``/``metadata[delivery_id]`` (see ``Identify``).
- ``require_key`` (default on) refuses a request without a key (400); Stripe itself accepts
  one (it is then simply not idempotent): ``require_key = false`` models that.

Divergence, on purpose: Stripe answers 409 to a second request with a key whose first
request is still executing; this preset serialises them instead (the second is replayed).
The ``orders`` preset models the 409.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt
from fake_providers._identify import Identify
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._options import globs, integer, seconds, switch
from fake_providers._preset import Core, PresetSpec
from fake_providers._reply import Reply, json_response, raw_json
from fake_providers._routing import Route

DECLINE = {
    "error": {
        "type": "card_error",
        "code": "card_declined",
        "message": "The destination declined this payment.",
    }
}


class Payments(MessagePreset):
    """Stripe-like idempotency with saved replies and a lookup by key."""

    name = "payments"
    key_header = "Idempotency-Key"
    accepts_form = True
    text_fields = ("body", "description")

    @property
    def key_required(self) -> bool:
        return bool(self.options["require_key"])

    def extra_routes(self) -> list[Route]:
        return [
            Route("/v1/messages", ("GET",), self.lookup),
            Route("/v1/<path:resource>", ("POST",), self.core.handle_message),
        ]

    def needs_attribution(self) -> tuple[str, ...]:
        return ("run", "destination")

    def refusal(self, request: Request, status: int, error: str, reason: str) -> tuple[int, Any]:
        if not _stripe_route(request):
            return status, {"error": error, "reason": reason}
        kind = "invalid_request_error" if status in (400, 404, 413) else "api_error"
        if status == 401:
            kind = "authentication_error"
        elif status == 403:
            kind = "permission_error"
        return status, {"error": {"type": kind, "message": reason}, "reason": reason}

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        assert attempt.credential_id is not None
        if attempt.idempotency_key is None:
            return self._accept(incoming, {}, accepted_before=False)
        echo = {"Idempotency-Key": incoming.key}
        now = core.now()
        prior = core.log.find_acceptance(
            epoch=core.epoch,
            credential_id=attempt.credential_id,
            idempotency_key=incoming.key,
            saved_errors=True,
        )
        if prior is not None and now - prior.effect.received_at < self.options["window_s"]:
            original = prior.effect
            if original.payload_hash != attempt.payload_hash:
                first = core.log.request_of(original.seq)
                reason = (
                    f"idempotency_error: key {incoming.key!r} was first used with other"
                    f" parameters (rule: same key, same endpoint and parameters);"
                    f" {_differences(first, incoming)}"
                )
                error: Any = "idempotency key reused with different parameters"
                status = self.options["mismatch_status"]
                if _stripe_route(incoming.request):
                    # Stripe answers 400 with this message (stripe/stripe-ruby#503).
                    status = 400
                    error = {
                        "type": "idempotency_error",
                        "message": "Keys for idempotent requests can only be used with the same"
                        " parameters they were first used with. Try using a key other than"
                        f" {incoming.key!r} if you meant to execute a different request.",
                    }
                return core.record(
                    attempt,
                    outcome="rejected",
                    status=status,
                    payload={"error": error, "reason": reason},
                    headers=echo,
                    fault=incoming.fault_name,
                    reason=reason,
                )
            core.append(
                attempt,
                outcome="deduplicated",
                status=original.status_code,
                provider_message_id=original.provider_message_id,
                fault=incoming.fault_name,
                received_at=now,
            )
            headers = {**echo, "Idempotent-Replayed": "true"}
            return Reply(raw_json(original.status_code or 200, prior.response_body, headers))
        accepted_before = prior is not None and (
            prior.effect.accepted or self._ever_accepted(attempt, incoming.key)
        )
        return self._accept(incoming, echo, accepted_before=accepted_before)

    def _accept(self, incoming: Incoming, echo: dict[str, str], *, accepted_before: bool) -> Reply:
        core = self.core
        attempt = incoming.attempt
        if any(fnmatch.fnmatchcase(incoming.destination, g) for g in self.options["decline"]):
            return core.record(
                attempt,
                outcome="rejected",
                status=402,
                payload=DECLINE,
                headers=echo,
                fault=incoming.fault_name,
                save=self.options["replay_errors"],
                reason=f"declined: destination {incoming.destination!r} matches decline globs",
            )
        message_id = core.mint_id(attempt, "msg_")
        answer: dict[str, Any] = {
            "id": message_id,
            "status": "accepted",
            "destination": incoming.destination,
        }
        if _stripe_route(incoming.request):
            resource = incoming.request.path.removeprefix("/v1/").split("/")[0]
            answer = {
                "id": message_id,
                "object": resource.rstrip("s") or "object",
                "status": "succeeded",
                "livemode": False,
                **({"destination": incoming.destination} if incoming.destination else {}),
            }
        return core.record(
            attempt,
            outcome="expired_then_accepted" if accepted_before else "fresh",
            status=200,
            payload=json.dumps(answer, separators=(",", ":")),
            headers=echo,
            fault=incoming.fault_name,
            provider_message_id=message_id,
            save=attempt.idempotency_key is not None,
        )

    def _ever_accepted(self, attempt: Attempt, key: str) -> bool:
        found = self.core.log.find_acceptance(
            epoch=self.core.epoch, credential_id=attempt.credential_id, idempotency_key=key
        )
        return found is not None

    def lookup(self, request: Request) -> Reply:
        """GET /v1/messages?idempotency_key=K: the caller's accepted message for K."""
        core = self.core
        if not self.options["lookup"]:
            return Reply(json_response(404, {"error": "not found"}))
        key = request.args.get("idempotency_key") or None
        credential = core.bearer_credential(request)
        with core.lock:
            if credential is None:
                attempt = Attempt(idempotency_key=key)
                payload = {"error": "unauthenticated"}
                return core.record(attempt, outcome="unauthenticated", status=401, payload=payload)
            if key is None:
                return Reply(json_response(400, {"error": "missing idempotency_key parameter"}))
            found = core.log.find_acceptance(
                epoch=core.epoch, credential_id=credential.credential_id, idempotency_key=key
            )
        if found is None:
            return Reply(json_response(404, {"error": "not found"}))
        effect = found.effect
        answer: dict[str, Any] = {
            "id": effect.provider_message_id,
            "status": "accepted",
            "destination": effect.destination,
            "run_id": effect.run_id,
            "idempotency_key": effect.idempotency_key,
        }
        return Reply(json_response(200, answer))


def _stripe_route(request: Request) -> bool:
    """True for Stripe's own ``/v1/<resource>`` endpoints (not the harness's /v1/messages)."""
    return request.path != "/v1/messages"


def _params(raw: bytes | None) -> dict[str, Any] | None:
    """A request's parameters (JSON object or form) for a near-miss comparison."""
    if raw is None:
        return None
    try:
        decoded = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    return decoded if isinstance(decoded, dict) else {"(body)": decoded}


def _differences(first_raw: bytes | None, incoming: Incoming) -> str:
    """WireMock-style near miss: which parameters differ from the key's first request."""
    first = _params(first_raw)
    now = dict(incoming.body) if isinstance(incoming.seen.json, dict) or incoming.body else {}
    if first is None:
        return "the first request is not kept, so the difference cannot be named"
    changed = sorted(k for k in set(first) | set(now) if first.get(k) != now.get(k))
    if not changed:
        return "the endpoint or the body's encoding differs"
    shown = [f"{k} (first {_short(first.get(k))}, now {_short(now.get(k))})" for k in changed[:5]]
    more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    return "differs in: " + "; ".join(shown) + more


def _short(value: object) -> str:
    if value is None:
        return "absent"
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _build(core: Core, options: Mapping[str, Any]) -> Payments:
    return Payments(core, options)


SPEC = PresetSpec(
    name="payments",
    models="Stripe-like payments API (Idempotency-Key, replayed replies, lookup by key)",
    options=(
        seconds("window_s", default=86_400, help="how long a key is remembered"),
        switch("lookup", default=True, help="serve GET /v1/messages?idempotency_key="),
        switch("replay_errors", default=True, help="save and replay declines like successes"),
        globs("decline", help="destinations whose payments are declined (402)"),
        switch(
            "require_key",
            default=True,
            help="refuse a request without Idempotency-Key (Stripe accepts it: false)",
        ),
        integer(
            "mismatch_status",
            default=422,
            help="status for a key reused with different parameters",
            minimum=400,
            maximum=499,
        ),
    ),
    factory=_build,
    identify=Identify.of(
        run=[
            "json:/run_id",
            "form:run_id",
            "json:/metadata/run_id",
            "form:metadata[run_id]",
            "header:X-Run-Id",
        ],
        destination=[
            "json:/destination",
            "form:destination",
            "json:/customer",
            "form:customer",
            "json:/transfer_data/destination",
            "form:transfer_data[destination]",
        ],
        delivery=[
            "json:/delivery_id",
            "form:delivery_id",
            "json:/metadata/delivery_id",
            "form:metadata[delivery_id]",
            "header:X-Delivery-Id",
        ],
        recognizer=[
            "json:/recognizer",
            "form:recognizer",
            "json:/metadata/recognizer",
            "form:metadata[recognizer]",
            r"regex:ch-[0-9a-f]{12}",
        ],
    ),
)
