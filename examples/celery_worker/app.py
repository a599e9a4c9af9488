"""A delivery worker built on Celery, with the Redis broker (Kombu's Redis transport).

The shape is the usual one: an outbox table in the application database says which
deliveries were handed to the broker; one Celery task per delivery posts it to the provider
with a stable idempotency key and records the send. The harness execs
``python -m examples.celery_worker.buggy`` (or ``.fixed``) as a daemon: the program enqueues
the outbox, then runs Celery's worker in the foreground (prefork pool, one child) until the
harness stops it with SIGTERM, Celery's warm shutdown.

``buggy`` keeps Celery's defaults; ``fixed`` acknowledges a message only once its task has
finished and requeues it when the pool child running it dies (see README.md).

Each case gets its own queue and its own Kombu key prefix (both derived from the case
database), so cases never share messages, nor Kombu's ``unacked`` hash: a worker restored
after a restart gap would otherwise put back every other case's in-flight messages too.
"""

from __future__ import annotations

import os
from typing import Any

import requests
from celery import Celery  # type: ignore[import-untyped]
from sqlalchemy import text

from harness import boundary
from harness.usersystem import jobs
from harness.worker_config import WorkerConfig

#: where the worker's crash points are (every process of the worker counts its hits together)
BOUNDARIES = ("after_enqueue", "job_started", "after_provider_accept")
#: set CELERY_EXAMPLE_REDIS_URL to use another Redis (DB 5 keeps clear of RQ's DB 0)
REDIS_URL = os.environ.get("CELERY_EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/5")
#: what every key of this example starts with: set CELERY_EXAMPLE_NAMESPACE to tell two runs'
#: keys apart on one Redis (the tests do, so a run beside theirs is never counted as theirs)
NAMESPACE = os.environ.get("CELERY_EXAMPLE_NAMESPACE", "celery-example")

app = Celery("deliveries", broker=REDIS_URL)  # no result backend: celery_sent says it
app.conf.broker_connection_retry_on_startup = True


def key_prefix(config: WorkerConfig) -> str:
    """Kombu's ``global_keyprefix`` for the case: every key it writes starts with this."""
    return f"{NAMESPACE}:{config.case_key}:"


def configure(config: WorkerConfig, *, fixed: bool) -> str:
    """Point the app at this case's queue and keys; ``fixed`` adds three settings."""
    queue = f"deliveries-{config.case_key}"
    app.conf.update(
        task_default_queue=queue,
        broker_transport_options={"global_keyprefix": key_prefix(config)},
    )
    if fixed:
        app.conf.update(
            task_acks_late=True,  # ack when the task has finished, not when it starts
            task_reject_on_worker_lost=True,  # a pool child died: requeue, do not ack
            worker_prefetch_multiplier=1,  # hold no more unacked messages than one
        )
    return queue


@app.task(name="deliveries.send")  # type: ignore[untyped-decorator]
def send(delivery_id: str) -> None:
    """Post one delivery, keyed by its identity, then record it as sent."""
    boundary("job_started")
    config = WorkerConfig.from_env()
    engine = config.db.engine()
    try:
        with engine.connect() as c:
            if c.execute(
                text("SELECT 1 FROM celery_sent WHERE delivery_id = :d"), {"d": delivery_id}
            ).first():
                return  # a second message for a delivery already sent (re-enqueued outbox)
        job = next(j for j in jobs(config) if j.delivery_id == delivery_id)
        response = requests.post(job.url, json=job.message, headers=dict(job.headers), timeout=5)
        boundary("after_provider_accept")
        response.raise_for_status()
        with engine.begin() as c:
            c.execute(
                text("INSERT INTO celery_sent (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"),
                {"d": delivery_id},
            )
    finally:
        engine.dispose()


def prepare(engine: Any) -> None:
    """The application's own tables, created in each case's fresh database."""
    with engine.begin() as c:
        for table in ("celery_outbox", "celery_sent"):
            c.execute(
                text(f"CREATE TABLE IF NOT EXISTS {table} (delivery_id VARCHAR(64) PRIMARY KEY)")
            )


def enqueue_outbox(config: WorkerConfig, queue: str) -> None:
    """Hand every delivery not yet in the outbox to the broker, once (a crash between the
    send and the outbox row sends a second message; the task skips a delivery already sent)."""
    engine = config.db.engine()
    try:
        for job in list(jobs(config)):
            with engine.connect() as c:
                if c.execute(
                    text("SELECT 1 FROM celery_outbox WHERE delivery_id = :d"),
                    {"d": job.delivery_id},
                ).first():
                    continue
            send.apply_async((job.delivery_id,), queue=queue, task_id=f"{queue}-{job.delivery_id}")
            boundary("after_enqueue")
            with engine.begin() as c:
                c.execute(
                    text(
                        "INSERT INTO celery_outbox (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"
                    ),
                    {"d": job.delivery_id},
                )
    finally:
        engine.dispose()


def run(*, fixed: bool) -> None:
    """One worker incarnation: fill the queue from the outbox, then work it until stopped."""
    config = WorkerConfig.from_env()
    queue = configure(config, fixed=fixed)
    enqueue_outbox(config, queue)
    app.worker_main(
        [
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            f"--queues={queue}",
            f"--hostname={queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ]
    )
