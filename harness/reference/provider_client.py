"""The reference worker's HTTP adapter: turn every provider answer into one decision.

The classification is the heart of restart safety. A 2xx is an acceptance. A dropped
connection or a timeout is *unknown*: the provider may well have accepted. 408, 425, 429 and
5xx are retryable. Any other 4xx is a permanent failure. Only a lookup can turn unknown into known.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import requests


class Answer(Enum):
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


@dataclass(frozen=True)
class SendResult:
    answer: Answer
    provider_message_id: str | None = None
    retry_after_s: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Lookup:
    """Outcome of asking the provider about a key: found, not found, or could not ask."""

    found: bool
    provider_message_id: str | None = None
    error: str | None = None
    #: False when nothing was (or could be) inspected: "not found" then only means "unknown",
    #: and a resend is safe only inside the key's dedupe window (queue-fifo)
    conclusive: bool = True


class ProviderClient:
    """Speaks the fake providers' HTTP API (and any real API shaped like it)."""

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
        payload = {
            "destination": destination,
            "run_id": run_id,
            "delivery_id": delivery_id,
            "body": body,
            "recognizer": recognizer,
        }
        try:
            resp = self.session.post(
                f"{self.base_url}/v1/messages",
                json=payload,
                headers={"Idempotency-Key": key},
                timeout=self.timeout_s,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            return SendResult(Answer.UNKNOWN, detail=type(exc).__name__)
        return classify(resp)

    def lookup(self, key: str) -> Lookup:
        try:
            resp = self.session.get(
                f"{self.base_url}/v1/messages",
                params={"idempotency_key": key},
                timeout=self.timeout_s,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            return Lookup(found=False, error=type(exc).__name__)
        if resp.status_code == 200:
            return Lookup(found=True, provider_message_id=str(resp.json()["id"]))
        if resp.status_code == 404:
            return Lookup(found=False)
        return Lookup(found=False, error=f"lookup answered {resp.status_code}")


def classify(resp: requests.Response, *, id_field: str = "id") -> SendResult:
    """Map an HTTP answer to a decision (kept pure so it is unit-tested with ``responses``).

    ``id_field`` names the provider's message id in a 2xx body (``id``, SQS's ``MessageId``,
    Slack's ``ts``). A 2xx without it is still an acceptance the worker cannot name: unknown.
    """
    code = resp.status_code
    if 200 <= code < 300:
        try:
            ident = resp.json()[id_field]
        except (ValueError, KeyError, TypeError):
            return SendResult(Answer.UNKNOWN, detail=f"HTTP {code} without {id_field!r}")
        return SendResult(Answer.ACCEPTED, provider_message_id=str(ident))
    if code in (408, 425, 429) or code >= 500:  # temporary: ask again later
        retry_after = resp.headers.get("Retry-After")
        try:
            delay = float(retry_after) if retry_after is not None else None
        except ValueError:
            delay = None
        return SendResult(Answer.RETRYABLE, retry_after_s=delay, detail=f"HTTP {code}")
    return SendResult(Answer.PERMANENT, detail=f"HTTP {code}: {resp.text[:200]}")
