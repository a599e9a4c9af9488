"""A daemon worker for the lifecycle tests: it delivers what ``jobs()`` holds, then waits for
more forever, as a Celery worker does, until its stop signal.

``python -m tests._daemon MODE``, where MODE is

- ``correct``: post with the job's idempotency key, then mark it done; on SIGTERM exit 0;
- ``marks-first``: mark the job done, then post: a crash in between loses it;
- ``ignores-term``: ``correct``, but SIGTERM is ignored (the harness must SIGKILL it);
- ``pool``: each job runs in a forked child; when a child dies by a signal the parent exits 1
  (a supervisor that gives up), so the harness restarts it only under ``exits_after_crash``;
- ``visibility``: a job taken by an earlier incarnation is taken again only once its claim is
  600 s old on the wall clock (a broker's visibility timeout), so a restart finishes it soon
  only when the harness moves the worker's wall clock (``fake_time``).

The settle probe is ``tests._daemon:pending`` (jobs not yet done, by this worker's table).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import requests
from sqlalchemy import Engine, text

from harness import Job, WorkerConfig, boundary, jobs

#: a claim older than this on the worker's wall clock may be taken again
VISIBILITY_TIMEOUT_S = 600
#: the teardown hook appends the case's database to this file
TEARDOWN_LOG_ENV = "CH_TEST_TEARDOWN_LOG"


def prepare(engine: Engine) -> None:
    with engine.begin() as c:
        c.execute(
            text("CREATE TABLE IF NOT EXISTS daemon_done (delivery_id VARCHAR(64) PRIMARY KEY)")
        )
        c.execute(
            text(
                "CREATE TABLE IF NOT EXISTS daemon_claim"
                " (delivery_id VARCHAR(64) PRIMARY KEY, claimed_at FLOAT)"
            )
        )


def pending(config: WorkerConfig) -> dict[str, int]:
    engine = config.db.engine()
    try:
        with engine.connect() as c:
            done = {r[0] for r in c.execute(text("SELECT delivery_id FROM daemon_done"))}
    finally:
        engine.dispose()
    return {"undone": sum(1 for j in jobs(config) if j.delivery_id not in done)}


def teardown(config: WorkerConfig) -> None:
    log = os.environ.get(TEARDOWN_LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{config.db.url}|{config.db.schema or ''}\n")


def _mark(engine: Engine, delivery_id: str) -> None:
    with engine.begin() as c:
        c.execute(
            text("INSERT INTO daemon_done (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"),
            {"d": delivery_id},
        )


def _claimable(engine: Engine, delivery_id: str) -> bool:
    """Claim the job unless an earlier incarnation's claim is still "visible"."""
    now = time.time()
    with engine.begin() as c:
        row = c.execute(
            text("SELECT claimed_at FROM daemon_claim WHERE delivery_id = :d"), {"d": delivery_id}
        ).first()
        if row is not None and now - row[0] < VISIBILITY_TIMEOUT_S:
            return False
        c.execute(text("DELETE FROM daemon_claim WHERE delivery_id = :d"), {"d": delivery_id})
        c.execute(
            text("INSERT INTO daemon_claim (delivery_id, claimed_at) VALUES (:d, :t)"),
            {"d": delivery_id, "t": now},
        )
    return True


def _post(job: Job) -> None:
    reply = requests.post(job.url, json=job.message, headers=dict(job.headers), timeout=5)
    reply.raise_for_status()


def _deliver(config: WorkerConfig, engine: Engine, mode: str) -> None:
    with engine.connect() as c:
        done = {r[0] for r in c.execute(text("SELECT delivery_id FROM daemon_done"))}
    for job in list(jobs(config)):
        if job.delivery_id in done:
            continue
        if mode == "visibility" and not _claimable(engine, job.delivery_id):
            continue
        if mode == "marks-first":
            _mark(engine, job.delivery_id)
        if mode == "pool":
            child = os.fork()
            if child == 0:
                boundary("job_started")
                _post(job)
                boundary("after_provider_accept")
                _mark(engine, job.delivery_id)
                os._exit(0)
            _, status = os.waitpid(child, 0)
            if os.WIFSIGNALED(status):
                print(f"pool child {child} died by signal {os.WTERMSIG(status)}", file=sys.stderr)
                sys.exit(1)
            continue
        boundary("job_started")
        _post(job)
        boundary("after_provider_accept")
        _mark(engine, job.delivery_id)


def main(mode: str) -> None:
    if mode == "ignores-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    config = WorkerConfig.from_env()
    engine = config.db.engine()
    while True:  # a daemon: look for work now and then, forever
        _deliver(config, engine, mode)
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1])
