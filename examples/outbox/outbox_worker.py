"""The plain outbox duplicate: post, then mark sent. A crash in between sends twice."""

import requests
from sqlalchemy import text

from harness import boundary, jobs, simple_system


def main(config):
    db = config.db.engine()
    with db.begin() as c:
        c.execute(text("CREATE TABLE IF NOT EXISTS sent (id VARCHAR(64) PRIMARY KEY)"))
    for job in list(jobs(config)):
        with db.begin() as c:
            if c.execute(text("SELECT 1 FROM sent WHERE id = :i"), {"i": job.delivery_id}).first():
                continue
        requests.post(job.url, json=job.message, headers=job.headers, timeout=5)
        boundary("after_provider_accept")
        with db.begin() as c:
            c.execute(text("INSERT INTO sent VALUES (:i)"), {"i": job.delivery_id})


SYSTEM = simple_system(main, name="outbox_worker:SYSTEM", boundaries=["after_provider_accept"])
