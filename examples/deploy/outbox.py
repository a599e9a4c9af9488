"""The outbox worker of this example, in the versions a deploy hands work between.

Each delivery of the outbox gets a row (its idempotency key and its state) written before
the webhook is posted, with the key as ``webhook-id``; after the post the row is marked
``sent``. A row left ``attempted`` by a process that went away is posted again with its
key: the receiver dedupes on it.

What changes between the versions is one helper and one habit:

- version 1 derives the key as ``run:destination``;
- version 2 derives it otherwise (``sha1`` of the same), after a refactor;
  ``stored_key=True`` (the fixed version 2) sends the key a row already holds, and derives
  one only for a row it writes itself; ``stored_key=False`` (naive) derives it every time.
- ``on_sigterm``: ``default`` (Python's: the process ends at once, as a crash),
  ``finish`` (finish the delivery at hand, then exit 0: a graceful shutdown).

Settings from its own environment: DATABASE_URL, WEBHOOK_URL, WEBHOOK_TOKEN.
"""

import hashlib
import json
import os
import signal
import sys

import requests
from sqlalchemy import create_engine, text

from harness import boundary

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


def key_v1(run_id, destination):
    return f"{run_id}:{destination}"


def key_v2(run_id, destination):
    return "msg_" + hashlib.sha1(f"{run_id}|{destination}".encode()).hexdigest()


def run(derive_key, *, stored_key=True, on_sigterm="default"):
    stopping = []
    if on_sigterm == "finish":
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    db = create_engine(os.environ["DATABASE_URL"])
    url, token = os.environ["WEBHOOK_URL"], os.environ["WEBHOOK_TOKEN"]
    with db.begin() as c:
        c.execute(
            text(
                "CREATE TABLE IF NOT EXISTS outbox"
                " (id VARCHAR(300) PRIMARY KEY, idem_key TEXT NOT NULL, state TEXT NOT NULL)"
            )
        )
    with db.connect() as c:
        work = c.execute(text(WORK)).all()
    for run_id, payload, destination in work:
        if stopping:  # a graceful shutdown: the delivery at hand was finished
            sys.exit(0)
        row_id = {"id": f"{run_id}:{destination}"}
        with db.begin() as c:
            row = c.execute(
                text("SELECT idem_key, state FROM outbox WHERE id = :id"), row_id
            ).first()
            if row is None:
                key = derive_key(run_id, destination)
                c.execute(
                    text("INSERT INTO outbox VALUES (:id, :k, 'attempted')"), {**row_id, "k": key}
                )
            else:
                key = row.idem_key if stored_key else derive_key(run_id, destination)
        if row is not None and row.state == "sent":
            continue
        requests.post(
            url,
            json={"destination": destination, "run_id": run_id, "order": json.loads(payload)},
            headers={"Authorization": f"Bearer {token}", "webhook-id": key},
            timeout=5,
        ).raise_for_status()
        boundary("after_send")
        with db.begin() as c:
            c.execute(text("UPDATE outbox SET state = 'sent' WHERE id = :id"), row_id)
