"""``webhook``: a receiver following the Standard Webhooks specification.

Follows Standard Webhooks (https://www.standardwebhooks.com/, spec:
https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):

- Each delivery carries ``webhook-id`` (the same on every retry of one message: "can be
  used as an idempotency key"), ``webhook-timestamp`` (Unix seconds) and
  ``webhook-signature`` (space-separated ``v1,<base64 HMAC-SHA256>`` of
  ``"{id}.{timestamp}.{body}"``, keyed by the secret; a ``whsec_`` secret is base64 after
  the prefix). ``webhook-id`` is required here (400 without it).
- A receiver must reject a bad signature and a timestamp outside its tolerance (the spec's
  libraries use 5 minutes): 401, logged ``unauthenticated``. The tolerance is checked on the
  provider clock (``tolerance_s``). The signing secret is one of the provider's
  credentials; as a convenience for workers without signing, a bearer token is accepted too.
- Whether a duplicate ``webhook-id`` is processed twice is the receiver's choice. With
  ``dedupe`` on (the default), a repeat within ``window_s`` is acknowledged (200, with the
  first delivery's id) but not processed again, logged ``deduplicated``; after the window it
  is processed again, ``expired_then_accepted``. With ``dedupe`` off every delivery is
  processed (``fresh``), as a naive receiver does. Ids are scoped to the endpoint
  (destination).
- Any JSON body is taken (an object, an array, a string), posted to any path: the path is
  the endpoint (``POST /hooks/orders`` is destination ``hooks/orders``); the harness's own
  ``POST /v1/messages`` with a ``destination`` field still works (the default
  identification rule reads ``json:/destination`` first, then ``path:/{destination:path}``).
  The spec's headers are all a sender needs; run and the user's own id are read by the
  ``Identify`` rule (``X-Run-Id``/``run_id`` by default), never required.
- The sender's way to check after a timeout is the receiver's own record:
  ``GET /v1/deliveries`` (bearer; only destinations in the caller's scope) lists every
  delivery that reached the handler, duplicates marked by their outcome.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Request

from fake_providers._credentials import Credential
from fake_providers._identify import Identify, Seen
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._options import seconds, switch
from fake_providers._preset import Core, PresetSpec
from fake_providers._records import ACCEPTED_OUTCOMES
from fake_providers._reply import Reply, json_response
from fake_providers._routing import Route


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: base64 after ``whsec_``, else the secret's UTF-8 bytes."""
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except binascii.Error:
            pass
    return secret.encode()


def sign(secret: str, webhook_id: str, timestamp: int | str, body: bytes) -> str:
    """The ``webhook-signature`` header value (``v1,<base64>``) a sender would send."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class Webhook(MessagePreset):
    """Standard Webhooks receiver; dedupe on webhook-id is a switch."""

    name = "webhook"
    key_header = "webhook-id"
    missing_key_error = "missing webhook-id header"

    @property
    def key_required(self) -> bool:
        return True

    def extra_routes(self) -> list[Route]:
        return [
            Route("/v1/deliveries", ("GET",), self.deliveries),
            # The receiving endpoint: any path (the spec leaves URLs to the receiver).
            Route("/<path:endpoint>", ("POST",), self.core.handle_message),
        ]

    def validate(self, incoming: Incoming) -> tuple[int, str, str] | None:
        if incoming.request.path.startswith("/_admin/"):
            return 404, "not found", f"{incoming.request.path} is no admin endpoint"
        return None

    def body_error(self, seen: Seen) -> str | None:
        """Any JSON value is a payload (the spec: "the payload ... JSON"), not only objects."""
        return None if seen.json_error is None else f"body must be JSON: {seen.json_error}"

    def text_of(self, seen: Seen) -> str:
        found = seen.json.get("body") if isinstance(seen.json, dict) else None
        return found if isinstance(found, str) else seen.text

    def authenticate(self, request: Request, raw: bytes) -> Credential | str:
        if request.headers.get("Authorization"):
            return self.core.bearer_or_reason(request)
        webhook_id = request.headers.get("webhook-id", "")
        stamp = request.headers.get("webhook-timestamp")
        given = request.headers.get("webhook-signature")
        if stamp is None or given is None:
            missing = [
                h
                for h, v in (("webhook-timestamp", stamp), ("webhook-signature", given))
                if v is None
            ]
            return (
                f"no {' or '.join(missing)} header, and no Authorization: Bearer; a Standard"
                " Webhooks delivery is signed (webhook-id, webhook-timestamp, webhook-signature)"
            )
        presented = given.split()
        try:
            sent_at = int(stamp)
        except ValueError:
            return f"webhook-timestamp {stamp!r} is not an integer (Unix seconds)"
        skew = self.core.now() - sent_at
        if abs(skew) > self.options["tolerance_s"]:
            return (
                f"webhook-timestamp {stamp} is {abs(skew):.0f} s"
                f" {'behind' if skew > 0 else 'ahead of'} the provider clock;"
                f" tolerance_s is {self.options['tolerance_s']:g}"
            )
        found: Credential | None = None
        for credential in self.core.credentials.values():
            expected = sign(credential.secret, webhook_id, stamp, raw).encode()
            for candidate in presented:
                if hmac.compare_digest(expected, candidate.encode()):
                    found = credential
        if found is not None:
            return found
        versions = sorted({c.partition(",")[0] for c in presented}) or ["none"]
        return (
            "webhook-signature matches no credential: expected v1,<base64 HMAC-SHA256 of"
            " '{webhook-id}.{webhook-timestamp}.{body}'>"
            f" (got version(s) {', '.join(versions)}; the body must be signed exactly as sent)"
        )

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        now = core.now()
        prior = core.log.find_acceptance(
            epoch=core.epoch, destination=incoming.destination, idempotency_key=incoming.key
        )
        fresh = prior is None or now - prior.effect.received_at >= self.options["window_s"]
        if self.options["dedupe"] and not fresh:
            assert prior is not None
            core.append(
                attempt,
                outcome="deduplicated",
                status=200,
                provider_message_id=prior.effect.provider_message_id,
                fault=incoming.fault_name,
                received_at=now,
            )
            reply = {"received": True, "duplicate": True, "id": prior.effect.provider_message_id}
            return Reply(json_response(200, reply))
        delivery = core.mint_id(attempt, "dlv_")
        expired = self.options["dedupe"] and prior is not None
        return core.record(
            attempt,
            outcome="expired_then_accepted" if expired else "fresh",
            status=200,
            payload={"received": True, "id": delivery},
            fault=incoming.fault_name,
            provider_message_id=delivery,
            save=True,
            content=incoming.text,
        )

    def deliveries(self, request: Request) -> Reply:
        """GET /v1/deliveries[?destination=D]: what this receiver got, oldest first."""
        core = self.core
        credential = core.bearer_credential(request)
        if credential is None:
            return Reply(json_response(401, {"error": "unauthenticated"}))
        wanted = request.args.get("destination") or None
        with core.lock:
            epoch = core.epoch
        outcomes = (*ACCEPTED_OUTCOMES, "deduplicated")
        found = core.log.messages(
            epoch=epoch, outcomes=outcomes, destinations=None if wanted is None else [wanted]
        )
        out = [
            {
                "id": m.effect.provider_message_id,
                "webhook_id": m.effect.idempotency_key,
                "destination": m.effect.destination,
                "run_id": m.effect.run_id,
                "delivery_id": m.effect.delivery_id,
                "recognizer": m.effect.recognizer,
                "outcome": m.effect.outcome,
                "received_at": m.effect.received_at,
                "body": m.content,
            }
            for m in found
            if m.effect.destination is not None and credential.allows(m.effect.destination)
        ]
        return Reply(json_response(200, {"deliveries": out}))


def _build(core: Core, options: Mapping[str, Any]) -> Webhook:
    return Webhook(core, options)


SPEC = PresetSpec(
    name="webhook",
    models="Standard Webhooks receiver (webhook-id dedupe on or off, signed deliveries)",
    options=(
        switch("dedupe", default=True, help="honour webhook-id (a repeat is not processed again)"),
        seconds("window_s", default=86_400, help="how long webhook-ids are remembered"),
        seconds("tolerance_s", default=300, help="accepted webhook-timestamp skew"),
    ),
    factory=_build,
    identify=Identify.of(
        run=["json:/run_id", "header:X-Run-Id"],
        destination=["json:/destination", "path:/{destination:path}"],
        delivery=["json:/delivery_id", "header:X-Delivery-Id"],
        recognizer=["json:/recognizer", r"regex:ch-[0-9a-f]{12}"],
    ),
)
