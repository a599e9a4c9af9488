"""An outbox worker as it ships: post each order's webhook, then mark it sent.

It reads its settings from its own environment (DATABASE_URL, WEBHOOK_URL, WEBHOOK_TOKEN)
and its work from its own database (``run_requests`` and ``roster``). A crash after the
receiver accepted a webhook and before ``sent`` is committed makes the restarted worker
post it again: the receiver gets it twice.
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
    token = os.environ["WEBHOOK_TOKEN"]
    with db.begin() as c:
        c.execute(text("CREATE TABLE IF NOT EXISTS sent (id VARCHAR(300) PRIMARY KEY)"))
    with db.connect() as c:
        work = c.execute(text(WORK)).all()
    for run_id, payload, destination in work:
        key = f"{run_id}:{destination}"
        with db.connect() as c:
            if c.execute(text("SELECT 1 FROM sent WHERE id = :k"), {"k": key}).first():
                continue
        order = json.loads(payload)
        requests.post(
            url,
            json={"destination": destination, "run_id": run_id, "order": order},
            headers={"Authorization": f"Bearer {token}", "webhook-id": key},
            timeout=5,
        )
        with db.begin() as c:
            c.execute(text("INSERT INTO sent VALUES (:k)"), {"k": key})


if __name__ == "__main__":
    main()
