"""The shop's order-confirmation worker, as it ships: the naive version.

For each new order in its own ``orders`` table it tells the partner system (a Standard
Webhooks POST with ``requests``) and the customer (an e-mail with ``smtplib``), then marks the
order sent. Nothing it sends exists for a test harness: the webhook is the spec's three
headers and a JSON event, the mail is a plain RFC 5322 message.

The bug: the order is marked only after both sends. A crash after the webhook (or after the
mail) leaves the order ``new``, and the restarted worker sends again, under a fresh
``webhook-id`` and a fresh ``Message-ID``: the partner processes the event twice and the
customer gets two mails. The two ``boundary()`` lines are the only trace of the harness (a
no-op outside it); ``Settings.clock`` is there because the harness moves time (the
signature's timestamp must be on the receiver's clock), and defaults to ``time.time``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import smtplib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import make_msgid

import requests
from sqlalchemy import Engine, text

from harness import boundary


@dataclass(frozen=True)
class Settings:
    """Where the worker sends: in production read from its own config file."""

    webhook_url: str
    webhook_secret: str = field(repr=False)
    smtp_host: str
    smtp_port: int
    smtp_user: str
    smtp_password: str = field(repr=False)
    #: the mail provider's message search (used by the fixed worker only)
    mailbox_url: str = ""
    clock: Callable[[], float] = time.time
    timeout_s: float = 5.0


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks: ``v1,`` + base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``."""
    key = (
        base64.b64decode(secret.removeprefix("whsec_"))
        if secret.startswith("whsec_")
        else secret.encode()
    )
    digest = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def post_webhook(settings: Settings, webhook_id: str, order_id: str, email: str, item: str) -> None:
    """POST the ``order.confirmed`` event, signed as the Standard Webhooks spec says."""
    timestamp = int(settings.clock())
    body = json.dumps(
        {
            "type": "order.confirmed",
            "timestamp": timestamp,
            "data": {"order_id": order_id, "email": email, "item": item},
        }
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(settings.webhook_secret, webhook_id, timestamp, body),
    }
    requests.post(
        settings.webhook_url, data=body, headers=headers, timeout=settings.timeout_s
    ).raise_for_status()


def send_mail(settings: Settings, message_id: str, order_id: str, email: str, item: str) -> None:
    """The confirmation e-mail, over SMTP with AUTH."""
    message = EmailMessage()
    message["From"] = "shop@shop.example"
    message["To"] = email
    message["Subject"] = f"Order {order_id} confirmed"
    message["Message-ID"] = message_id
    message.set_content(f"Thank you! Your order {order_id} ({item}) is confirmed.")
    with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=settings.timeout_s) as smtp:
        smtp.login(settings.smtp_user, settings.smtp_password)
        smtp.send_message(message)


def new_orders(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT order_id, email, item FROM orders WHERE status = 'new' ORDER BY order_id")
        )
        return [(str(o), str(e), str(i)) for o, e, i in rows]


def mark_sent(engine: Engine, order_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE orders SET status = 'sent' WHERE order_id = :o"), {"o": order_id})


def confirm_orders(engine: Engine, settings: Settings) -> None:
    """Send both confirmations of every new order, then mark it sent."""
    for order_id, email, item in new_orders(engine):
        post_webhook(settings, f"msg_{uuid.uuid4().hex}", order_id, email, item)
        boundary("after_webhook")
        send_mail(settings, make_msgid(domain="shop.example"), order_id, email, item)
        boundary("after_mail")
        mark_sent(engine, order_id)
