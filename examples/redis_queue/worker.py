"""A delivery worker on a Redis list queue, the pattern RQ and Celery's Redis transport
build on: a producer pushes one job per delivery of the outbox onto a list and marks the
delivery enqueued in the application database; a consumer moves each job to a processing
list (``LMOVE``: a job taken is never only in a worker's memory), posts the webhook with a
stable ``webhook-id``, marks the delivery sent, and drops the job. On start it puts back
what a dead consumer left in the processing list. It exits once both lists are empty.

The database says only "enqueued": from there on, the job lives in Redis alone. Whether
that survives the broker restarting is the broker's persistence, not the worker's code:
the two scenarios beside this file run the same worker on a Redis without persistence
(``lossy.toml``) and with an append-only file (``durable.toml``).

Settings from its own environment: DATABASE_URL, BROKER_URL, WEBHOOK_URL, WEBHOOK_TOKEN.
"""

import json
import os

import redis
import requests
from sqlalchemy import create_engine, text

from harness import boundary

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


def main():
    db = create_engine(os.environ["DATABASE_URL"])
    queue = redis.Redis.from_url(os.environ["BROKER_URL"])
    url, token = os.environ["WEBHOOK_URL"], os.environ["WEBHOOK_TOKEN"]
    with db.begin() as c:
        c.execute(text("CREATE TABLE IF NOT EXISTS enqueued (id VARCHAR(300) PRIMARY KEY)"))
    produce(db, queue)
    boundary("after_enqueue")
    while queue.lmove("processing", "jobs", "RIGHT", "LEFT"):  # a dead consumer's jobs
        pass
    while (raw := queue.lmove("jobs", "processing", "RIGHT", "LEFT")) is not None:
        job = json.loads(raw)
        boundary("job_started")
        requests.post(
            url,
            json={
                "destination": job["destination"],
                "run_id": job["run_id"],
                "order": job["order"],
            },
            headers={"Authorization": f"Bearer {token}", "webhook-id": job["id"]},
            timeout=5,
        ).raise_for_status()
        boundary("after_provider_accept")
        queue.lrem("processing", 1, raw)


def produce(db, queue):
    """Each delivery of the outbox onto the queue, once: pushed, then marked enqueued."""
    with db.connect() as c:
        work = c.execute(text(WORK)).all()
    for run_id, payload, destination in work:
        job_id = f"{run_id}:{destination}"
        with db.begin() as c:
            if c.execute(text("SELECT 1 FROM enqueued WHERE id = :k"), {"k": job_id}).first():
                continue
            job = {"id": job_id, "run_id": run_id, "destination": destination}
            queue.lpush("jobs", json.dumps({**job, "order": json.loads(payload)}))
            c.execute(text("INSERT INTO enqueued VALUES (:k)"), {"k": job_id})


if __name__ == "__main__":
    main()
