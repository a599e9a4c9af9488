"""A worker whose commits all go through one helper (``save``), called from three places:
claim (with the idempotency key), "sent", "delivered". As ``python -m
tests._helper_commit_worker`` it clears the key when it marks a delivery sent, so a restart
between "sent" and "delivered" posts again under a new key; with ``fixed`` as its argument
it keeps the key. Only a crash after the helper's second use shows it: the first hit of
each point (all certify used to crash) is the claim.
"""

import json
import os
import sys
import uuid

import requests
from sqlalchemy import create_engine, text

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


def save(db, sql, **params):
    with db.begin() as c:
        c.execute(text(sql), params)


def main():
    fixed = sys.argv[1:] == ["fixed"]
    db = create_engine(os.environ["DATABASE_URL"])
    with db.begin() as c:
        c.execute(
            text(
                "CREATE TABLE IF NOT EXISTS outbox (id VARCHAR(300) PRIMARY KEY, k VARCHAR(64),"
                " status VARCHAR(16))"
            )
        )
    with db.connect() as c:
        work = c.execute(text(WORK)).all()
    for run_id, payload, destination in work:
        ident = f"{run_id}:{destination}"
        with db.connect() as c:
            row = c.execute(
                text("SELECT status, k FROM outbox WHERE id = :i"), {"i": ident}
            ).first()
        if row is None:
            key = uuid.uuid4().hex
            save(db, "INSERT INTO outbox VALUES (:i, :k, 'claimed')", i=ident, k=key)
            row = ("claimed", key)
        status, key = row
        if status == "delivered":
            continue
        key = key or uuid.uuid4().hex  # the key was cleared: a new one, a new message
        requests.post(
            os.environ["WEBHOOK_URL"],
            json={"destination": destination, "run_id": run_id, "order": json.loads(payload)},
            headers={"Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}", "webhook-id": key},
            timeout=5,
        ).raise_for_status()
        if fixed:
            save(db, "UPDATE outbox SET status = 'sent' WHERE id = :i", i=ident)
        else:
            save(db, "UPDATE outbox SET status = 'sent', k = NULL WHERE id = :i", i=ident)
        save(db, "UPDATE outbox SET status = 'delivered' WHERE id = :i", i=ident)


if __name__ == "__main__":
    main()
