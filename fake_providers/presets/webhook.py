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

from fake_providers._app import (
    Incoming,
    MessagePreset,
    PresetSpec,
    ProviderApp,
    Reply,
    Route,
    json_response,
)
from fake_providers._credentials import Credential
from fake_providers._options import seconds, switch
from fake_providers._records import ACCEPTED_OUTCOMES


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
        return [Route("/v1/deliveries", ("GET",), self.deliveries)]

    def authenticate(self, request: Request, raw: bytes) -> Credential | None:
        if request.headers.get("Authorization"):
            return self.core.bearer_credential(request)
        webhook_id = request.headers.get("webhook-id", "")
        stamp = request.headers.get("webhook-timestamp", "")
        presented = request.headers.get("webhook-signature", "").split()
        try:
            sent_at = int(stamp)
        except ValueError:
            return None
        if abs(self.core.now() - sent_at) > self.options["tolerance_s"]:
            return None
        found: Credential | None = None
        for credential in self.core.credentials.values():
            expected = sign(credential.secret, webhook_id, stamp, raw).encode()
            for candidate in presented:
                if hmac.compare_digest(expected, candidate.encode()):
                    found = credential
        return found

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
            content=str(incoming.body["body"]),
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


def _build(core: ProviderApp, options: Mapping[str, Any]) -> Webhook:
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
)
