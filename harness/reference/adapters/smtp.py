"""``smtp``: mail over SMTP with AUTH on loopback; reconcile by searching the mailbox.

SMTP has no idempotency, so a resend is safe only after the mailbox search
(``GET /v1/mailbox?to=&q=<recognizer>``) said conclusively that no earlier attempt arrived.
The mail carries ``X-Run-Id``/``X-Delivery-Id`` (so the provider can attribute it), the
recognizer in ``X-Recognizer`` and in the visible text, and a ``Message-ID`` derived from the
delivery's key (stable across attempts; the server does not dedupe on it).

Answers: the final ``250 ... queued as <id>`` is an acceptance; a connection cut or a timeout
*after* DATA went out is unknown; any failure before DATA was sent is retryable (nothing
could have been accepted); 4xx is retryable, 5xx permanent.
"""

from __future__ import annotations

import re
import smtplib
from email import policy
from email.message import EmailMessage
from typing import ClassVar

import requests

from harness.reference.adapters.base import HttpSession, ReconcileTarget, network_error
from harness.reference.provider_client import Answer, Lookup, SendResult

SENDER = "crash-harness-worker@localhost"
_QUEUED = re.compile(r"queued as\s+(\S+)", re.IGNORECASE)
#: how a mail to a non-ASCII mailbox is written: UTF-8 headers, sent with SMTPUTF8
_UTF8 = policy.SMTPUTF8


def build_message(
    *, key: str, destination: str, run_id: str, delivery_id: str, body: str, recognizer: str
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = destination
    message["Subject"] = (body.strip().splitlines() or ["notification"])[0][:200]
    message["Message-ID"] = f"<{key}@crash-harness.invalid>"
    message["X-Run-Id"] = run_id
    message["X-Delivery-Id"] = delivery_id
    message["X-Recognizer"] = recognizer
    text = body if recognizer in body else f"{body}\n\n[ref {recognizer}]"
    message.set_content(text)
    return message


def classify_reply(code: int, detail: str) -> SendResult:
    if 400 <= code < 500:
        return SendResult(Answer.RETRYABLE, detail=f"SMTP {code}: {detail}")
    return SendResult(Answer.PERMANENT, detail=f"SMTP {code}: {detail}")


class SmtpAdapter(HttpSession):
    preset: ClassVar[str] = "smtp"
    has_lookup: ClassVar[bool] = False

    def __init__(
        self,
        base_url: str,
        secret: str,
        *,
        timeout_s: float,
        smtp_port: int,
        username: str,
        smtp_host: str = "127.0.0.1",
    ) -> None:
        super().__init__(base_url, secret, timeout_s=timeout_s)
        self.smtp_host = smtp_host
        self.smtp_port = smtp_port
        self.username = username
        self._secret = secret

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
        message = build_message(
            key=key,
            destination=destination,
            run_id=run_id,
            delivery_id=delivery_id,
            body=body,
            recognizer=recognizer,
        )
        data_sent = False
        # a mailbox with a non-ASCII name (RFC 6531) goes out only over SMTPUTF8, with the
        # headers in UTF-8: smtplib would otherwise fail to encode the RCPT command
        international = not destination.isascii()
        try:
            with smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=self.timeout_s) as conn:
                conn.login(self.username, self._secret)
                if international and not conn.has_extn("smtputf8"):
                    return SendResult(
                        Answer.PERMANENT,
                        detail=f"the SMTP server offers no SMTPUTF8 for <{destination}>",
                    )
                code, reply = conn.mail(SENDER, ["SMTPUTF8"] if international else [])
                if code != 250:
                    return classify_reply(code, reply.decode(errors="replace"))
                code, reply = conn.rcpt(destination)
                if code not in (250, 251):
                    return classify_reply(code, reply.decode(errors="replace"))
                data_sent = True
                mail = message.as_bytes(policy=_UTF8) if international else message.as_bytes()
                code, reply = conn.data(mail)
        except smtplib.SMTPResponseException as exc:  # auth, DATA refused, ...
            raw = exc.smtp_error
            detail = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            return classify_reply(exc.smtp_code, detail)
        except (smtplib.SMTPException, OSError) as exc:
            if data_sent:  # the mail may be queued; only the mailbox can tell
                return SendResult(Answer.UNKNOWN, detail=network_error(exc))
            return SendResult(Answer.RETRYABLE, detail=network_error(exc))
        text = reply.decode(errors="replace")
        if code != 250:  # smtplib returns the final reply to the message as it is
            return classify_reply(code, text)
        found = _QUEUED.search(text)
        if found is None:  # accepted, but under no id the mailbox could confirm
            return SendResult(Answer.UNKNOWN, detail=f"SMTP {code}: {text}")
        return SendResult(Answer.ACCEPTED, provider_message_id=found.group(1))

    def reconcile(self, target: ReconcileTarget) -> Lookup:
        try:
            resp = self.session.get(
                f"{self.base_url}/v1/mailbox",
                params={"to": target.destination, "q": target.recognizer},
                timeout=self.timeout_s,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            return Lookup(found=False, error=network_error(exc))
        if resp.status_code != 200:
            return Lookup(found=False, error=f"mailbox answered {resp.status_code}")
        try:
            messages = resp.json()["messages"]
        except (ValueError, KeyError, TypeError):
            return Lookup(found=False, error="mailbox answer without messages")
        for message in messages:
            if isinstance(message, dict) and target.recognizer in str(message.get("text", "")):
                return Lookup(found=True, provider_message_id=str(message["id"]))
        return Lookup(found=False)
