"""Hostile workers that send a second message to a recipient under identities nobody intended.

Each intended message goes out once correctly (with the harness's run id, delivery id and
key, retried under the same key through the workload's faults), then once more to the same
recipient under a run id, delivery id and key of the worker's own. No (run, recipient) pair
is reached twice, so a count per pair sees nothing; every recipient got the message twice.

- ``AGAIN_UNDER_NEW_IDS``: a user's own system (``simple_system`` on ``jobs()``, no ledger
  adapter), so nothing but the providers' logs can catch it. On 8213f3e ``certify --case
  baseline`` of it said ``ok baseline``, exit 0, with 6 intended and 12 accepted.
- ``AGAIN_ON_REFERENCE``: the reference worker, which, once everything is settled, sends every
  delivered row once more under made-up ids (its ledger is the reference's, whose checkers
  already saw effects of runs it never committed on 8213f3e).
- ``AGAIN_WITHOUT_ADAPTER``: the same worker plugged in without a ledger adapter, as a user's
  own worker often is: only the providers' logs judge it, and on 8213f3e it passed.

Importable as ``tests._hostile_unintended:NAME`` for ``--system``.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace

import requests
from sqlalchemy import Engine, text

from harness.reference.provider_client import Answer
from harness.reference.worker import ReferenceWorker
from harness.snapshot import PartialLedger, unread_ledger
from harness.systems import resolve
from harness.usersystem import Job, boundary, jobs, simple_system
from harness.worker_config import WorkerConfig

#: what ``AGAIN_ON_REFERENCE`` prints on stderr (the report keeps its tail): how many second
#: copies the provider accepted, so a test knows the hostile act happened without asking
#: the harness it tests
COPIES = "hostile copies accepted: "

#: how often one send is tried before the worker gives up on it (the faults are transient)
TRIES = 6


def made_up(kind: str, delivery_id: str) -> str:
    """An id of the worker's own: fresh to the provider and the intent, yet the same in every
    run of a seed (a determinism rerun compares like with like)."""
    return f"{kind}_{hashlib.sha256(f'mine:{kind}:{delivery_id}'.encode()).hexdigest()[:20]}"


def _post(config: WorkerConfig, job: Job, message: dict[str, str], key: str) -> None:
    """POST until the provider answers (a dropped reply or a 503 is retried, same key)."""
    headers = {**job.headers, "Idempotency-Key": key}
    for _ in range(TRIES):
        try:
            reply = requests.post(
                job.url, json=message, headers=headers, timeout=config.request_timeout_s
            )
        except requests.RequestException:
            continue  # no reply: it may have landed; the same key makes the retry safe
        if reply.status_code < 500 and reply.status_code != 429:
            reply.raise_for_status()
            return
    raise RuntimeError(f"gave up on {job.destination} after {TRIES} tries")


def _again_under_new_ids(config: WorkerConfig) -> None:
    """Each job once as intended, then once more under a made-up run, delivery and key."""
    for job in list(jobs(config)):
        _post(config, job, job.message, job.idempotency_key)
        boundary("after_send")
        again = {
            **job.message,
            "run_id": made_up("run", job.delivery_id),
            "delivery_id": made_up("dlv", job.delivery_id),
        }
        _post(config, job, again, made_up("key", job.delivery_id))


AGAIN_UNDER_NEW_IDS = simple_system(
    _again_under_new_ids,
    name="tests._hostile_unintended:AGAIN_UNDER_NEW_IDS",
    boundaries=["after_send"],
    description="sends each message once, then once more under made-up run, delivery and key",
)


def _again_on_reference(config: WorkerConfig) -> None:
    """The reference, then every delivered row sent once more under made-up ids."""
    worker = ReferenceWorker(config)
    worker.run()
    engine = config.db.engine()
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT delivery_id, destination, body, recognizer FROM deliveries"
                    " WHERE delivery_status = 'delivered' ORDER BY delivery_id"
                )
            ).all()
    finally:
        engine.dispose()
    again = ReferenceWorker(config)
    accepted = 0
    try:
        for delivery_id, destination, body, recognizer in rows:
            sent = again.provider.send(
                key=made_up("key", delivery_id),
                destination=destination,
                run_id=made_up("run", delivery_id),
                delivery_id=made_up("dlv", delivery_id),
                body=body,
                recognizer=recognizer,
            )
            accepted += sent.answer is Answer.ACCEPTED
    finally:
        again.provider.close()
        again.ledger.close()
        print(f"{COPIES}{accepted}", file=sys.stderr, flush=True)


def copies_accepted(report_case: dict[str, object]) -> int:
    """The second copies every incarnation of ``AGAIN_ON_REFERENCE`` in a report's case said
    the provider accepted (from the stderr tails the harness keeps)."""
    total = 0
    workers = report_case.get("workers")
    for worker in workers if isinstance(workers, list) else ():
        for line in str(worker.get("stderr_tail") or "").splitlines():
            if line.startswith(COPIES):
                total += int(line[len(COPIES) :])
    return total


AGAIN_ON_REFERENCE = replace(
    resolve("reference"),
    name="tests._hostile_unintended:AGAIN_ON_REFERENCE",
    description="the reference, then every delivered row once more under made-up ids",
    main=_again_on_reference,
)


def _no_adapter(engine: Engine) -> PartialLedger:
    return unread_ledger(AGAIN_WITHOUT_ADAPTER.name)


AGAIN_WITHOUT_ADAPTER = replace(
    AGAIN_ON_REFERENCE,
    name="tests._hostile_unintended:AGAIN_WITHOUT_ADAPTER",
    description="AGAIN_ON_REFERENCE, plugged in without a ledger adapter",
    read_ledger=_no_adapter,
)
