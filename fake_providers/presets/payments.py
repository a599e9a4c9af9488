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

Divergence, on purpose: Stripe answers 409 to a second request with a key whose first
request is still executing; this preset serialises them instead (the second is replayed).
The ``orders`` preset models the 409.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Request

from fake_providers._app import (
    MESSAGE_FIELDS,
    Attempt,
    Incoming,
    MessagePreset,
    PresetSpec,
    ProviderApp,
    Reply,
    Route,
    json_response,
    raw_json,
)
from fake_providers._options import globs, integer, seconds, switch

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
    required_fields = MESSAGE_FIELDS

    @property
    def key_required(self) -> bool:
        return True

    def extra_routes(self) -> list[Route]:
        return [Route("/v1/messages", ("GET",), self.lookup)]

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        assert attempt.credential_id is not None
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
                return core.record(
                    attempt,
                    outcome="rejected",
                    status=self.options["mismatch_status"],
                    payload={"error": "idempotency key reused with different parameters"},
                    headers=echo,
                    fault=incoming.fault_name,
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
        if any(fnmatch.fnmatchcase(incoming.destination, g) for g in self.options["decline"]):
            return core.record(
                attempt,
                outcome="rejected",
                status=402,
                payload=DECLINE,
                headers=echo,
                fault=incoming.fault_name,
                save=self.options["replay_errors"],
            )
        accepted_before = prior is not None and (
            prior.effect.accepted or self._ever_accepted(attempt, incoming.key)
        )
        message_id = core.mint_id(attempt, "msg_")
        body = json.dumps(
            {"id": message_id, "status": "accepted", "destination": incoming.destination},
            separators=(",", ":"),
        )
        return core.record(
            attempt,
            outcome="expired_then_accepted" if accepted_before else "fresh",
            status=200,
            payload=body,
            headers=echo,
            fault=incoming.fault_name,
            provider_message_id=message_id,
            save=True,
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


def _build(core: ProviderApp, options: Mapping[str, Any]) -> Payments:
    return Payments(core, options)


SPEC = PresetSpec(
    name="payments",
    models="Stripe-like payments API (Idempotency-Key, replayed replies, lookup by key)",
    options=(
        seconds("window_s", default=86_400, help="how long a key is remembered"),
        switch("lookup", default=True, help="serve GET /v1/messages?idempotency_key="),
        switch("replay_errors", default=True, help="save and replay declines like successes"),
        globs("decline", help="destinations whose payments are declined (402)"),
        integer(
            "mismatch_status",
            default=422,
            help="status for a key reused with different parameters",
            minimum=400,
            maximum=499,
        ),
    ),
    factory=_build,
)
