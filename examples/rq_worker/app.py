"""A delivery worker built on a real task-queue library: RQ on Redis.

The shape is the usual one: an outbox table in the application database says which
deliveries were handed to the queue; RQ's worker runs each job in a forked work-horse (its own
process group); the job posts to the provider with a stable idempotency key and records the
send. The harness exec's ``python -m examples.rq_worker.buggy`` (or ``.fixed``) with the case's
database, provider and crash plan in its environment, and restarts it after every crash.

``buggy`` keeps RQ's defaults; ``fixed`` changes two things (see README.md):

- ``Retry(max=3)``: a job whose work-horse died is retried instead of failed for good;
- a recovery sweep for jobs left "started" by a worker that no longer exists (RQ's own
  ``StartedJobRegistry.cleanup`` only acts after the job's heartbeat TTL, at least 60 s).

Each case gets its own queue name (derived from the case database), so cases never share jobs.
"""

from __future__ import annotations

import os
from typing import Any

import requests
from redis import Redis
from rq import Queue, Retry, Worker
from rq.job import Job as RQJob
from rq.registry import StartedJobRegistry
from sqlalchemy import text

from harness import boundary
from harness.usersystem import jobs
from harness.worker_config import WorkerConfig

#: where the worker's crash points are (every process of the worker counts its hits together)
BOUNDARIES = ("after_enqueue", "job_started", "after_provider_accept")
#: set RQ_EXAMPLE_REDIS_URL to use another Redis
REDIS_URL = os.environ.get("RQ_EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/0")
#: the queues' name before the case key: set RQ_EXAMPLE_QUEUE to tell two runs' queues apart
#: on one Redis (the tests do, so a run beside theirs is never counted as theirs)
QUEUE = os.environ.get("RQ_EXAMPLE_QUEUE", "deliveries")


def queue_name(config: WorkerConfig) -> str:
    """One queue per case database: ``deliveries-<hash>``."""
    return f"{QUEUE}-{config.case_key}"


def connect() -> Redis:
    return Redis.from_url(REDIS_URL)


def send(delivery_id: str) -> None:
    """The RQ job: post one delivery, keyed by its identity, then record it as sent."""
    boundary("job_started")
    config = WorkerConfig.from_env()
    job = next(j for j in jobs(config) if j.delivery_id == delivery_id)
    response = requests.post(job.url, json=job.message, headers=dict(job.headers), timeout=5)
    boundary("after_provider_accept")
    response.raise_for_status()
    engine = config.db.engine()
    try:
        with engine.begin() as c:
            c.execute(
                text("INSERT INTO rq_sent (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"),
                {"d": delivery_id},
            )
    finally:
        engine.dispose()


def prepare(engine: Any) -> None:
    """The application's own tables, created in each case's fresh database."""
    with engine.begin() as c:
        c.execute(
            text("CREATE TABLE IF NOT EXISTS rq_outbox (delivery_id VARCHAR(64) PRIMARY KEY)")
        )
        c.execute(text("CREATE TABLE IF NOT EXISTS rq_sent (delivery_id VARCHAR(64) PRIMARY KEY)"))


def enqueue_outbox(config: WorkerConfig, queue: Queue, *, retry: Retry | None) -> None:
    """Hand every delivery not yet in the outbox to RQ, once."""
    engine = config.db.engine()
    try:
        for job in list(jobs(config)):
            with engine.connect() as c:
                if c.execute(
                    text("SELECT 1 FROM rq_outbox WHERE delivery_id = :d"), {"d": job.delivery_id}
                ).first():
                    continue
            job_id = f"{queue.name}-{job.delivery_id}"
            if not RQJob.exists(job_id, connection=queue.connection):
                queue.enqueue(send, job.delivery_id, job_id=job_id, retry=retry, job_timeout=30)
            boundary("after_enqueue")
            with engine.begin() as c:
                c.execute(
                    text("INSERT INTO rq_outbox (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"),
                    {"d": job.delivery_id},
                )
    finally:
        engine.dispose()


def requeue_abandoned(queue: Queue) -> list[str]:
    """Jobs "started" by a worker whose process is gone: retry them now.

    A worker registers its pid; on a single host, a started job whose worker pid is not alive
    was abandoned (crash, OOM kill). RQ would find it only after its heartbeat TTL expires."""
    registry = StartedJobRegistry(queue=queue)
    requeued = []
    for job_id in registry.get_job_ids(cleanup=False):
        job = RQJob.fetch(job_id, connection=queue.connection)
        worker = Worker.find_by_key(
            Worker.redis_worker_namespace_prefix + (job.worker_name or ""),
            connection=queue.connection,
        )
        if worker is not None and worker.pid is not None and _alive(worker.pid):
            continue
        registry.remove_executions(job)
        queue.enqueue_job(job)
        requeued.append(job_id)
    return requeued


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"


def pending(config: WorkerConfig) -> dict[str, int]:
    """What RQ still holds for this case: queued, started (running or abandoned), scheduled."""
    queue = Queue(queue_name(config), connection=connect())
    return {
        "queued": queue.count,
        "started": len(StartedJobRegistry(queue=queue).get_job_ids(cleanup=False)),
        "scheduled": len(queue.scheduled_job_registry.get_job_ids()),
    }


def teardown(config: WorkerConfig) -> None:
    """The teardown hook: delete every Redis key of this case's queue (queue, registries,
    jobs), so a long sweep leaves nothing behind in a Redis it shares."""
    redis = connect()
    for key in redis.scan_iter(match=f"rq:*{queue_name(config)}*", count=500):
        redis.delete(key)


class BurstWorker(Worker):
    """RQ's worker, its command channel polled every second instead of every 60 s.

    RQ (3.0) listens for commands (shutdown, kill-horse) in a redis-py pubsub thread that waits
    up to ``sleep_time`` (60 s) per poll. At teardown it unsubscribes, then calls the thread's
    ``stop()``, which in redis-py 8 joins the thread with no timeout. When the thread is
    waiting for a subscription the unsubscribe has just ended, that join lasts the whole 60 s:
    a burst worker that had finished every job stayed alive a minute more, and on a busy
    machine often enough that the harness's 60 s worker deadline called it hung (its stack:
    ``teardown -> unsubscribe -> PubSubWorkerThread.stop -> join``). With a 1 s poll the
    thread sees the stop within a second."""

    #: seconds the command thread waits per poll (RQ's own: 60)
    COMMAND_POLL_S = 1.0

    def subscribe(self) -> None:
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=self.COMMAND_POLL_S,
            daemon=True,
            exception_handler=getattr(self, "_pubsub_exception_handler", None),
        )


def run(*, fixed: bool) -> None:
    """One worker incarnation: fill the queue from the outbox, then work it until empty."""
    config = WorkerConfig.from_env()
    redis = connect()
    queue = Queue(queue_name(config), connection=redis)
    enqueue_outbox(config, queue, retry=Retry(max=3) if fixed else None)
    if fixed:
        requeue_abandoned(queue)
    BurstWorker([queue], connection=redis).work(burst=True, logging_level="WARNING")
