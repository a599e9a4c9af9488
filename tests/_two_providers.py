"""A worker that sends each job (a run) to two providers: its first destination through the
provider named ``hooks`` (a Standard Webhooks receiver), its second through ``pay`` (a
payments API), with a boundary between the two sends of one job.

``CORRECT`` keys each send by its (run, destination), so a resend after a crash is deduplicated
by the provider. ``NAIVE`` keys each send by the attempt (the worker incarnation), so the
resend a restart makes is a second effect at the recipient. Importable as
``tests._two_providers:CORRECT`` / ``:NAIVE`` for scenario files.
"""

from __future__ import annotations

from collections.abc import Callable

import requests
from sqlalchemy import Engine, text

from harness.usersystem import Job, boundary, jobs, simple_system
from harness.worker_config import WorkerConfig

#: which provider each position of a run's destinations goes to
ROUTE = ("hooks", "pay")
#: how often a send is tried before the worker gives up on it (a fault is transient)
TRIES = 6


def _create(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE sent (run_id TEXT, destination TEXT)"))


def _send(config: WorkerConfig, provider: str, job: Job, key: str) -> None:
    endpoint = config.provider(provider)
    header = "webhook-id" if endpoint.preset == "webhook" else "Idempotency-Key"
    headers = {"Authorization": f"Bearer {endpoint.credential}", header: key}
    for _ in range(TRIES):
        try:
            reply = requests.post(
                endpoint.url.rstrip("/") + "/v1/messages",
                json=job.message,
                headers=headers,
                timeout=config.request_timeout_s,
            )
        except requests.RequestException:
            continue  # no reply: it may have landed; the same key makes the retry safe
        if reply.status_code < 500 and reply.status_code != 429:
            reply.raise_for_status()
            return
    raise RuntimeError(f"{provider}: gave up on {job.destination} after {TRIES} tries")


def _worker(key_of: Callable[[WorkerConfig, Job], str]) -> Callable[[WorkerConfig], None]:
    def main(config: WorkerConfig) -> None:
        work = list(jobs(config))
        engine = config.db.engine()
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT run_id, destination FROM sent"))
                done = {(str(r[0]), str(r[1])) for r in rows}
            by_run: dict[str, list[Job]] = {}
            for job in work:
                by_run.setdefault(job.run_id, []).append(job)
            for run_jobs in by_run.values():
                for position, job in enumerate(run_jobs[: len(ROUTE)]):
                    if position > 0:
                        boundary("between_sends")
                    if (job.run_id, job.destination) in done:
                        continue
                    _send(config, ROUTE[position], job, key_of(config, job))
                    boundary("after_send")
                    with engine.begin() as conn:
                        conn.execute(
                            text("INSERT INTO sent VALUES (:r, :d)"),
                            {"r": job.run_id, "d": job.destination},
                        )
        finally:
            engine.dispose()

    return main


CORRECT = simple_system(
    _worker(lambda config, job: job.idempotency_key),
    name="tests._two_providers:CORRECT",
    boundaries=["after_send", "between_sends"],
    prepare=_create,
)
NAIVE = simple_system(
    _worker(lambda config, job: f"{job.idempotency_key}-{config.worker_name}"),
    name="tests._two_providers:NAIVE",
    boundaries=["after_send", "between_sends"],
    prepare=_create,
)


def _one_webhook(config: WorkerConfig) -> None:
    """Every job to the campaign's one provider, a Standard Webhooks receiver."""
    endpoint = next(iter(config.providers.values()))
    for job in jobs(config):
        _send(config, endpoint.name, job, job.idempotency_key)
        boundary("after_send")


#: a system of one's own that speaks the ``webhook`` preset (the reference has no adapter)
WEBHOOK = simple_system(
    _one_webhook, name="tests._two_providers:WEBHOOK", boundaries=["after_send"]
)
