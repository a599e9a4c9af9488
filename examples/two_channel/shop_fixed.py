"""The shop's worker, fixed: each send is safe to repeat, or is not repeated.

- The webhook gets a stable ``webhook-id`` per (order, event): a resend after a crash is the
  same message, which a Standard Webhooks receiver deduplicates (the spec: the id "can be
  used as an idempotency key").
- SMTP deduplicates nothing, so the mail is never sent twice instead: the worker writes
  ``attempted`` *before* sending, with a stable ``Message-ID``, and a restarted worker that
  finds ``attempted`` first asks the mail provider's message search whether that
  ``Message-ID`` arrived, sending only if it did not.
"""

from __future__ import annotations

import requests
from sqlalchemy import Engine, text

from harness import boundary

from .shop import Settings, mark_sent, new_orders, post_webhook, send_mail


def confirm_orders(engine: Engine, settings: Settings) -> None:
    """Send both confirmations of every new order, each at most once, then mark it sent."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS mail_outbox"
                " (order_id VARCHAR(32) PRIMARY KEY, message_id VARCHAR(200), state VARCHAR(16))"
            )
        )
    for order_id, email, item in new_orders(engine):
        post_webhook(settings, f"msg_{order_id}_confirmed", order_id, email, item)
        boundary("after_webhook")
        message_id = f"<{order_id}.confirmed@shop.example>"
        if not _mail_went_out(engine, settings, order_id, email, message_id):
            send_mail(settings, message_id, order_id, email, item)
            boundary("after_mail")
        mark_sent(engine, order_id)


def _mail_went_out(
    engine: Engine, settings: Settings, order_id: str, email: str, message_id: str
) -> bool:
    """True if an earlier attempt's mail arrived; else record this attempt (durably, before
    the send) and return False."""
    with engine.begin() as conn:
        state = conn.scalar(
            text("SELECT state FROM mail_outbox WHERE order_id = :o"), {"o": order_id}
        )
        if state is None:
            conn.execute(
                text("INSERT INTO mail_outbox VALUES (:o, :m, 'attempted')"),
                {"o": order_id, "m": message_id},
            )
            return False
    return mail_arrived(settings, order_id, email, message_id)


def mail_arrived(settings: Settings, order_id: str, email: str, message_id: str) -> bool:
    """Reconcile: ask the mail provider's message search whether ``message_id`` arrived."""
    found = requests.get(
        settings.mailbox_url,
        params={"to": email, "q": order_id},
        headers={"Authorization": f"Bearer {settings.smtp_password}"},
        timeout=settings.timeout_s,
    )
    found.raise_for_status()
    return any(m.get("message_id") == message_id for m in found.json()["messages"])
