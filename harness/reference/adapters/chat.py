"""``chat``: no key, no lookup; only the rendered thread can tell whether a message landed.

Before any resend the worker reads ``GET /v1/threads/<destination>`` and looks for the
delivery's recognizer. The body already carries it as visible text (``[ref ch-...]``), so it
survives a provider that strips hidden metadata; the metadata is looked at too when shown.
Found: delivered, with that message's ``ts`` as its id. Not found (a conclusive negative):
resend. The thread could not be read: unknown, ask again later.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

import requests

from harness.reference.adapters.base import (
    HttpSession,
    ReconcileTarget,
    network_error,
)
from harness.reference.provider_client import Lookup, SendResult


def mentions(message: dict[str, Any], recognizer: str) -> bool:
    """Does this rendered message carry the recognizer (visible text or shown metadata)?"""
    if recognizer in str(message.get("text", "")):
        return True
    metadata = message.get("metadata")
    if isinstance(metadata, dict):
        payload = metadata.get("event_payload")
        if isinstance(payload, dict) and payload.get("recognizer") == recognizer:
            return True
    return False


class ChatAdapter(HttpSession):
    preset: ClassVar[str] = "chat"
    has_lookup: ClassVar[bool] = False

    @property
    def can_reconcile(self) -> bool:
        return True

    @property
    def key_window_s(self) -> float | None:
        return None

    def send(
        self,
        *,
        key: str,
        destination: str,
        run_id: str,
        delivery_id: str,
        body: str,
        recognizer: str,
    ) -> SendResult:
        # Chat does not dedupe; the key is sent only so the provider's log names it.
        return self.send_keyed(
            key_header="Idempotency-Key",
            id_field="ts",
            key=key,
            destination=destination,
            run_id=run_id,
            delivery_id=delivery_id,
            body=body,
            recognizer=recognizer,
        )

    def reconcile(self, target: ReconcileTarget) -> Lookup:
        url = f"{self.base_url}/v1/threads/{quote(target.destination, safe='@')}"
        try:
            resp = self.session.get(url, timeout=self.timeout_s)
        except (requests.ConnectionError, requests.Timeout) as exc:
            return Lookup(found=False, error=network_error(exc))
        if resp.status_code != 200:
            return Lookup(found=False, error=f"thread answered {resp.status_code}")
        try:
            messages = resp.json()["messages"]
        except (ValueError, KeyError, TypeError):
            return Lookup(found=False, error="thread answer without messages")
        for message in messages:
            if isinstance(message, dict) and mentions(message, target.recognizer):
                return Lookup(found=True, provider_message_id=str(message["ts"]))
        return Lookup(found=False)
