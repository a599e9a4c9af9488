"""The outbox worker, fixed: write "attempted" before posting; after a restart, ask the
receiver whether the webhook already arrived before posting again. No duplicate, even from
a receiver that dedupes nothing.

Settings from its own environment (DATABASE_URL, WEBHOOK_URL, WEBHOOK_TOKEN), as before.
"""

import json
import os

import requests
from sqlalchemy import create_engine, text

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


def main():
    db = create_engine(os.environ["DATABASE_URL"])
    url = os.environ["WEBHOOK_URL"]
    auth = {"Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}"}
    with db.begin() as c:
        c.execute(
            text("CREATE TABLE IF NOT EXISTS outbox (id VARCHAR(300) PRIMARY KEY, state TEXT)")
        )
    with db.connect() as c:
        work = c.execute(text(WORK)).all()
    for run_id, payload, destination in work:
        key = {"k": f"{run_id}:{destination}"}
        with db.begin() as c:
            state = c.scalar(text("SELECT state FROM outbox WHERE id = :k"), key)
            if state is None:  # durable *before* the send: a restart knows it may have gone out
                c.execute(text("INSERT INTO outbox VALUES (:k, 'attempted')"), key)
        if state != "sent" and not (state == "attempted" and arrived(url, auth, destination, key)):
            requests.post(
                url,
                json={"destination": destination, "run_id": run_id, "order": json.loads(payload)},
                headers={**auth, "webhook-id": key["k"]},
                timeout=5,
            )
        with db.begin() as c:
            c.execute(text("UPDATE outbox SET state = 'sent' WHERE id = :k"), key)


def arrived(url, auth, destination, key):
    """Reconcile: did an earlier attempt reach the receiver? (its delivery list, by id)"""
    listing = url.rsplit("/", 1)[0] + "/v1/deliveries"
    found = requests.get(listing, params={"destination": destination}, headers=auth, timeout=5)
    found.raise_for_status()
    return any(d["webhook_id"] == key["k"] for d in found.json()["deliveries"])


if __name__ == "__main__":
    main()
