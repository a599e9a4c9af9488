"""Harness glue for the shop's worker: its orders from the case's planned work, its settings
from the case's two providers, and the two systems the scenarios name."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from sqlalchemy import Engine, text

from harness import planned_work, simple_system
from harness.worker_config import WorkerConfig

from . import shop, shop_fixed

#: the partner's receiving endpoint: the webhook provider counts it as the destination
HOOK_PATH = "hooks/orders"


def prepare(engine: Engine) -> list[tuple[str, str]]:
    """The shop's own orders, one per planned send; each is intended for two destinations."""
    orders = [
        (f"ORD-{n:04d}", work.destination, str(work.input.get("subject", "a parcel")))
        for n, work in enumerate(planned_work(engine), start=1)
    ]
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE orders (order_id VARCHAR(32) PRIMARY KEY, email VARCHAR(200),"
                " item VARCHAR(200), status VARCHAR(16))"
            )
        )
        for order_id, email, item in orders:
            conn.execute(
                text("INSERT INTO orders VALUES (:o, :e, :i, 'new')"),
                {"o": order_id, "e": email, "i": item},
            )
    return [(o, e) for o, e, _ in orders] + [(o, HOOK_PATH) for o, _, _ in orders]


def settings(config: WorkerConfig) -> shop.Settings:
    """The case's providers, by the names the scenario gives them."""
    hooks, mail = config.provider("hooks"), config.provider("mail")
    assert mail.smtp_port is not None
    return shop.Settings(
        webhook_url=f"{hooks.url}/{HOOK_PATH}",
        webhook_secret=hooks.credential,
        smtp_host=urlsplit(mail.url).hostname or "127.0.0.1",
        smtp_port=mail.smtp_port,
        smtp_user=mail.credential_id,
        smtp_password=mail.credential,
        mailbox_url=f"{mail.url}/v1/mailbox",
        clock=config.clock().now,
        timeout_s=config.request_timeout_s,
    )


def _main(confirm: Callable[[Engine, shop.Settings], None]) -> Callable[[WorkerConfig], None]:
    def main(config: WorkerConfig) -> None:
        engine = config.db.engine()
        try:
            confirm(engine, settings(config))
        finally:
            engine.dispose()

    return main


BOUNDARIES = ["after_webhook", "after_mail"]
NAIVE = simple_system(
    _main(shop.confirm_orders),
    name="examples.two_channel.crash:NAIVE",
    boundaries=BOUNDARIES,
    prepare=prepare,
)
FIXED = simple_system(
    _main(shop_fixed.confirm_orders),
    name="examples.two_channel.crash:FIXED",
    boundaries=BOUNDARIES,
    prepare=prepare,
)
