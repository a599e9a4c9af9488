"""Workers whose verdict changes between runs of one seed: the harness must never call that
a pass. Importable as ``tests._hostile_determinism:NAME`` for ``--system``.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.reference.worker import ReferenceWorker
from harness.systems import resolve
from harness.worker_config import WorkerConfig

_REF = resolve("reference")

#: env var: a counter file outside every case dir, which ALTERNATES counts its cases in
COUNTER_ENV = "CH_TEST_ALTERNATES_COUNTER"


def _case_number(config: WorkerConfig) -> int:
    """How many cases this system has started (this one included): a case's first worker
    (``w1``) counts one more under a lock, its later workers read the count."""
    path = Path(os.environ[COUNTER_ENV])
    with open(path, "a+") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)
        counter.seek(0)
        seen = int(counter.read().strip() or 0)
        if config.worker_name == "w1":
            seen += 1
            counter.seek(0)
            counter.truncate()
            counter.write(str(seen))
        return seen


def _alternates(config: WorkerConfig) -> None:
    """The reference on odd cases; on even ones (a rerun of the first case) it sends each
    message once more under a second key first, so the recipient gets it twice."""
    if _case_number(config) % 2:
        _REF.main(config)
        return

    class TwiceSender(ReferenceWorker):
        def attempt(self, claim: Any) -> None:
            self.adapter_for(claim).send(
                key=f"{claim.idempotency_key}-again",
                destination=claim.destination,
                run_id=claim.run_id,
                delivery_id=claim.delivery_id,
                body=claim.body,
                recognizer=claim.recognizer,
            )
            super().attempt(claim)

    TwiceSender(config).run()


ALTERNATES = replace(
    _REF,
    name="tests._hostile_determinism:ALTERNATES",
    description="the reference on one case in two, a duplicating worker on the other",
    main=_alternates,
)
