"""The outbox, fixed: write down "attempted" before posting; after a restart, ask the provider
(lookup by the stable key) before posting again. No duplicate, even with no provider dedupe."""

import requests
from sqlalchemy import text

from harness import boundary, jobs, simple_system


def main(config):
    db = config.db.engine()
    with db.begin() as c:
        c.execute(
            text("CREATE TABLE IF NOT EXISTS outbox (id VARCHAR(64) PRIMARY KEY, state TEXT)")
        )
    for job in list(jobs(config)):
        key = {"i": job.delivery_id}
        with db.begin() as c:
            state = c.scalar(text("SELECT state FROM outbox WHERE id = :i"), key)
            if state is None:  # durable *before* the send: a restart knows it may have gone out
                c.execute(text("INSERT INTO outbox VALUES (:i, 'attempted')"), key)
        if state != "sent" and not (state == "attempted" and already_accepted(job)):
            requests.post(job.url, json=job.message, headers=job.headers, timeout=5)
            boundary("after_provider_accept")
        with db.begin() as c:
            c.execute(text("UPDATE outbox SET state = 'sent' WHERE id = :i"), key)


def already_accepted(job):
    """Reconcile: did an earlier attempt reach the provider? (lookup by the stable key)"""
    params = {"idempotency_key": job.idempotency_key}
    return requests.get(job.url, params=params, headers=job.headers, timeout=5).status_code == 200


SYSTEM = simple_system(main, name="outbox_fixed:SYSTEM", boundaries=["after_provider_accept"])
