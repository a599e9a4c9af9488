"""What every provider adapter of the reference worker offers, and the shared HTTP plumbing.

An adapter hides one provider's wire protocol behind the same small interface:

- ``send(...)`` makes one attempt and classifies the answer (``SendResult``);
- ``reconcile(target)`` says whether an earlier attempt landed (``Lookup``): by asking for
  the key where the provider has a lookup, by inspecting the rendered surface for the
  delivery's recognizer where it has none, or (queue-fifo) not at all;
- ``can_reconcile`` is False when reconcile cannot learn anything (its "not found" is then
  ``conclusive=False``: a resend is safe only because the provider dedupes inside its window);
- ``key_window_s`` is the provider's dedupe window, or None when there is no key at all
  (chat, SMTP): a resend is then safe only after a conclusive negative inspection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import requests

from harness.reference.provider_client import Answer, Lookup, SendResult, classify


@dataclass(frozen=True)
class ReconcileTarget:
    """What an adapter may use to find an earlier attempt of one delivery."""

    key: str
    destination: str
    run_id: str
    delivery_id: str
    recognizer: str


class ProviderAdapter(Protocol):
    preset: ClassVar[str]
    #: whether the provider can be asked about a key (the checkers' ``provider_lookup``)
    has_lookup: ClassVar[bool]

    @property
    def can_reconcile(self) -> bool: ...

    @property
    def key_window_s(self) -> float | None: ...

    def send(
        self,
        *,
        key: str,
        destination: str,
        run_id: str,
        delivery_id: str,
        body: str,
        recognizer: str,
    ) -> SendResult: ...

    def reconcile(self, target: ReconcileTarget) -> Lookup: ...

    def close(self) -> None: ...


class HttpSession:
    """A bearer-authenticated session to one provider's HTTP side."""

    def __init__(self, base_url: str, secret: str, *, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        # The campaign's provider is on loopback: no proxy or .netrc applies, and looking them
        # up in the environment costs every request about a millisecond.
        self.session.trust_env = False
        self.session.headers["Authorization"] = f"Bearer {secret}"

    def close(self) -> None:
        self.session.close()

    def post_message(self, payload: dict[str, str], headers: dict[str, str]) -> requests.Response:
        return self.session.post(
            f"{self.base_url}/v1/messages", json=payload, headers=headers, timeout=self.timeout_s
        )

    def send_keyed(
        self,
        *,
        key_header: str,
        id_field: str,
        key: str,
        destination: str,
        run_id: str,
        delivery_id: str,
        body: str,
        recognizer: str,
    ) -> SendResult:
        """POST one message with ``key`` in ``key_header``; no answer at all is *unknown*."""
        payload = message_payload(
            destination=destination,
            run_id=run_id,
            delivery_id=delivery_id,
            body=body,
            recognizer=recognizer,
        )
        try:
            resp = self.post_message(payload, {key_header: key})
        except (requests.ConnectionError, requests.Timeout) as exc:
            return SendResult(Answer.UNKNOWN, detail=network_error(exc))
        return classify(resp, id_field=id_field)


def message_payload(
    *, destination: str, run_id: str, delivery_id: str, body: str, recognizer: str
) -> dict[str, str]:
    return {
        "destination": destination,
        "run_id": run_id,
        "delivery_id": delivery_id,
        "body": body,
        "recognizer": recognizer,
    }


def network_error(exc: BaseException) -> str:
    return type(exc).__name__
