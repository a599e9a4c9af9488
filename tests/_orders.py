"""An order-confirmation worker whose work is its own ``orders`` table, not ``jobs(config)``.

``prepare`` fills ``orders`` from the harness's planned work under the worker's own order
ids and returns the (order, e-mail) pairs it intends to confirm, so the harness holds it to
those. Importable as ``tests._orders:NAME`` for ``--system``.
"""

from __future__ import annotations

import smtplib
from email.message import EmailMessage
from typing import ClassVar
from urllib.parse import urlsplit

import requests
from sqlalchemy import Engine, text

from harness import LedgerAdapter, boundary, simple_system
from harness.usersystem import (
    delivery_id_for,
    idempotency_key_for,
    planned_work,
    recognizer_for,
)
from harness.worker_config import WorkerConfig


def prepare(engine: Engine) -> list[tuple[str, str]]:
    """The shop's own orders, one per planned send, under the shop's own ids."""
    orders = [
        (f"order-{n:03d}", work.destination, str(work.input.get("subject", "")))
        for n, work in enumerate(planned_work(engine), start=1)
    ]
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE orders (order_id VARCHAR(32) PRIMARY KEY, email VARCHAR(200),"
                " item VARCHAR(200), status VARCHAR(16), confirmed_by VARCHAR(32))"
            )
        )
        for order_id, email, item in orders:
            conn.execute(
                text("INSERT INTO orders VALUES (:o, :e, :i, 'new', NULL)"),
                {"o": order_id, "e": email, "i": item},
            )
    return [(order_id, email) for order_id, email, _ in orders]


def _confirm(config: WorkerConfig, order_id: str, email: str, item: str) -> None:
    recognizer = recognizer_for(order_id, email)
    requests.post(
        config.provider_url.rstrip("/") + "/v1/messages",
        json={
            "destination": email,
            "run_id": order_id,
            "delivery_id": delivery_id_for(order_id, email),
            "body": f"Your order {item} is confirmed.\n\n[ref {recognizer}]",
            "recognizer": recognizer,
        },
        headers={
            "Authorization": f"Bearer {config.credential_secret}",
            "Idempotency-Key": idempotency_key_for(order_id, email),
        },
        timeout=config.request_timeout_s,
    ).raise_for_status()


def _mail(config: WorkerConfig, order_id: str, email: str, item: str, *, attributed: bool) -> None:
    """The confirmation as an e-mail, as ``docs/own-worker.md`` shows it (SMTP section)."""
    message = EmailMessage()
    message["From"] = "shop@example.com"
    message["To"] = email
    message["Subject"] = f"Order {order_id} confirmed"
    # stable per delivery: the server does not dedupe on it, but the checkers compare it
    message["Message-ID"] = f"<{idempotency_key_for(order_id, email)}@shop.example>"
    if attributed:  # what the checks need today to count the mail against its delivery
        message["X-Run-Id"] = order_id
        message["X-Delivery-Id"] = delivery_id_for(order_id, email)
        message["X-Recognizer"] = recognizer_for(order_id, email)
    message.set_content(f"Your order {item} is confirmed.")
    host = urlsplit(config.provider_url).hostname or "127.0.0.1"
    assert config.provider_smtp_port is not None, "run with the smtp preset"
    with smtplib.SMTP(host, config.provider_smtp_port, timeout=config.request_timeout_s) as smtp:
        smtp.login(config.credential_id, config.credential_secret)
        smtp.send_message(message)


def _run(
    config: WorkerConfig, *, skip_last: bool, status: str = "sent", channel: str = "http"
) -> None:
    db = config.db.engine()
    try:
        with db.connect() as conn:
            todo = conn.execute(
                text("SELECT order_id, email, item FROM orders WHERE status = 'new' ORDER BY 1")
            ).all()
        if skip_last:  # the bug: an off-by-one drops the newest order
            todo = todo[:-1]
        for order_id, email, item in todo:
            if channel == "http":
                _confirm(config, order_id, email, item)
            else:
                _mail(config, order_id, email, item, attributed=channel == "mail")
            boundary("after_provider_accept")
            with db.begin() as conn:
                conn.execute(
                    text("UPDATE orders SET status = :s, confirmed_by = :w WHERE order_id = :o"),
                    {"s": status, "w": config.worker_name, "o": order_id},
                )
    finally:
        db.dispose()


def _confirms_all(config: WorkerConfig) -> None:
    _run(config, skip_last=False)


def _drops_one(config: WorkerConfig) -> None:
    _run(config, skip_last=True)


def _marks_shipped(config: WorkerConfig) -> None:
    _run(config, skip_last=False, status="shipped")


def _mails(config: WorkerConfig) -> None:
    _run(config, skip_last=False, channel="mail")


def _mails_unattributed(config: WorkerConfig) -> None:
    _run(config, skip_last=False, channel="bare mail")


def _mails_bare_twice(config: WorkerConfig) -> None:
    """The mutant-ish sender: each order's mail twice, with nothing a default rule reads as
    the run (no ``X-Run-Id``), so only the harness's attribution can catch the duplicate."""
    db = config.db.engine()
    try:
        with db.connect() as conn:
            todo = conn.execute(text("SELECT order_id, email, item FROM orders ORDER BY 1")).all()
        for order_id, email, item in todo:
            for _ in range(2):
                _mail(config, order_id, email, item, attributed=False)
        boundary("after_provider_accept")
    finally:
        db.dispose()


def prepare_one_inbox(engine: Engine) -> list[tuple[str, str]]:
    """Every order to one customer: a mail that names no run could be any order's."""
    pairs = prepare(engine)
    email = pairs[0][1]
    with engine.begin() as conn:
        conn.execute(text("UPDATE orders SET email = :e"), {"e": email})
    return [(order_id, email) for order_id, _ in pairs]


class OrdersLedger(LedgerAdapter):
    """The orders table as the checkers read it; ``shipped`` is deliberately not mapped."""

    deliveries_sql = """
        SELECT order_id AS run_id, email AS destination, status, confirmed_by AS created_by
        FROM orders WHERE status <> 'new'
    """
    states: ClassVar[dict[str, str]] = {"sent": "delivered"}


_BOUNDARIES = ["after_provider_accept"]

CORRECT = simple_system(
    _confirms_all, name="tests._orders:CORRECT", boundaries=_BOUNDARIES, prepare=prepare
)
DROPS_ONE = simple_system(
    _drops_one, name="tests._orders:DROPS_ONE", boundaries=_BOUNDARIES, prepare=prepare
)
UNMAPPED = simple_system(
    _marks_shipped,
    name="tests._orders:UNMAPPED",
    boundaries=_BOUNDARIES,
    prepare=prepare,
    ledger=OrdersLedger,
)
MAILS = simple_system(_mails, name="tests._orders:MAILS", boundaries=_BOUNDARIES, prepare=prepare)
MAILS_UNATTRIBUTED = simple_system(
    _mails_unattributed,
    name="tests._orders:MAILS_UNATTRIBUTED",
    boundaries=_BOUNDARIES,
    prepare=prepare,
)
MAILS_BARE_TWICE = simple_system(
    _mails_bare_twice,
    name="tests._orders:MAILS_BARE_TWICE",
    boundaries=_BOUNDARIES,
    prepare=prepare,
)
MAILS_BARE_TWICE_ONE_INBOX = simple_system(
    _mails_bare_twice,
    name="tests._orders:MAILS_BARE_TWICE_ONE_INBOX",
    boundaries=_BOUNDARIES,
    prepare=prepare_one_inbox,
)
