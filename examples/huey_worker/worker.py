"""A Huey worker as it ships: enqueue each order's webhook, then run Huey's consumer in
process mode (a worker process and a scheduler process, both forked from this one).

It reads its settings from its own environment (DATABASE_URL: a SQLite URL, the file that
holds its work and Huey's queue; WEBHOOK_URL, WEBHOOK_TOKEN) and knows nothing of the
harness. Huey takes a task off its queue (a committed ``DELETE``) before it runs it: a crash
between the two loses the task, and nothing brings it back. While idle, Huey's scheduler
still commits once a second (``BEGIN EXCLUSIVE; SELECT ... FROM schedule; COMMIT``): an
idle poll, which changes no row.
"""

import json
import os
import sqlite3

import requests
from huey import SqliteHuey

DB = os.environ["DATABASE_URL"].removeprefix("sqlite:///")
huey = SqliteHuey("orders", filename=DB)

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


@huey.task()
def post_webhook(run_id, destination, order):
    requests.post(
        os.environ["WEBHOOK_URL"],
        json={"destination": destination, "run_id": run_id, "order": order},
        headers={
            "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
            "webhook-id": f"{run_id}:{destination}",
        },
        timeout=5,
    )


def enqueue_new_work():
    """Enqueue every job not enqueued before (a restarted worker enqueues nothing twice)."""
    conn = sqlite3.connect(DB, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS enqueued (id TEXT PRIMARY KEY)")
    for run_id, payload, destination in conn.execute(WORK).fetchall():
        key = f"{run_id}:{destination}"
        if conn.execute("SELECT 1 FROM enqueued WHERE id = ?", (key,)).fetchone():
            continue
        post_webhook(run_id, destination, json.loads(payload))
        conn.execute("INSERT INTO enqueued VALUES (?)", (key,))
        conn.commit()
    conn.close()
    huey.storage.close()  # the consumer's processes open their own connections


def main():
    enqueue_new_work()
    huey.create_consumer(workers=1, worker_type="process").run()


if __name__ == "__main__":
    main()
