"""The outbox, fixed: write down "attempted" before posting; after a restart, ask the provider
(lookup by the stable key) before posting again. No duplicate, even with no provider dedupe."""

import requests
from sqlalchemy import text

from harness import boundary
from harness.usersystem import jobs, simple_system

MARK = "INSERT INTO outbox (id, state) VALUES (:i, 'attempted')"


def main(config):
    db = config.db.engine()
    with db.begin() as c:
        c.execute(
            text("CREATE TABLE IF NOT EXISTS outbox (id VARCHAR(64) PRIMARY KEY, state TEXT)")
        )
    for job in list(jobs(config)):
        with db.begin() as c:
            state = c.scalar(text("SELECT state FROM outbox WHERE id = :i"), {"i": job.delivery_id})
            if state is None:
                c.execute(text(MARK), {"i": job.delivery_id})
        if state == "sent":
            continue
        lookup = {"idempotency_key": job.idempotency_key}
        if (
            state is None
            or requests.get(job.url, params=lookup, headers=job.headers).status_code == 404
        ):
            requests.post(job.url, json=job.message, headers=job.headers, timeout=5)
            boundary("after_provider_accept")
        with db.begin() as c:
            c.execute(
                text("UPDATE outbox SET state = 'sent' WHERE id = :i"), {"i": job.delivery_id}
            )


SYSTEM = simple_system(main, name="outbox_fixed:SYSTEM", boundaries=["after_provider_accept"])
