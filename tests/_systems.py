"""Deliberately misbehaving systems that the harness must report, never pass.

Importable as ``tests._systems:NAME`` for ``--system`` in subprocess tests.
"""

from __future__ import annotations

import os
import signal

from harness.reference.worker import ReferenceWorker
from harness.systems import System, resolve
from harness.worker_config import WorkerConfig

_REF = resolve("reference")


def _dies(config: WorkerConfig) -> None:
    raise RuntimeError("worker exploded on its own")


def _hangs(config: WorkerConfig) -> None:
    ready = os.environ.get("CH_TEST_READY_FIFO")
    if ready:
        with open(ready, "w") as fifo:  # tells the test a worker is running, without sleeps
            fifo.write("ready\n")
    signal.pause()
    while True:  # pragma: no cover - only a signal ends this
        signal.pause()


def _loses_everything(config: WorkerConfig) -> None:
    """Does the work but never delivers: a silent loss the harness must flag."""
    worker = ReferenceWorker(config)
    try:
        for run in worker.ledger.pending_runs():
            result = worker.compose(run)
            worker.ledger.commit_result(
                run,
                step_id="compose",
                result_body=result,
                destinations=worker.ledger.resolve_destinations(run.topic),
            )
    finally:
        worker.engine.dispose()


DIES = System(
    name="tests._systems:DIES",
    description="raises at start",
    main=_dies,
    prepare=_REF.prepare,
    read_ledger=_REF.read_ledger,
)
HANGS = System(
    name="tests._systems:HANGS",
    description="never returns",
    main=_hangs,
    prepare=_REF.prepare,
    read_ledger=_REF.read_ledger,
)
LOSES = System(
    name="tests._systems:LOSES",
    description="commits, never delivers",
    main=_loses_everything,
    prepare=_REF.prepare,
    read_ledger=_REF.read_ledger,
)
