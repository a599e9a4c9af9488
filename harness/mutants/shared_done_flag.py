"""Mutant ``shared_done_flag``: one "done" flag for the execution and its delivery.

The run's status says ``committed`` as soon as the result is stored, and the worker reads
that one flag as "this run is finished". On a restart it skips every run that is already
done: it does not enqueue the deliveries a crash left unwritten, and it drops the queue items
of done runs instead of sending them. A crash after the commit (before or during delivery)
therefore loses the messages without a trace of failure; ``no_silent_loss`` must catch it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.schema import Execution
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class SharedDoneFlagWorker(ReferenceWorker):
    """Reads "result committed" as "run done": after a restart, done runs are not delivered."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.done_at_start: set[str] = set()

    def recover(self) -> None:
        with Session(self.engine) as s:
            self.done_at_start = set(
                s.scalars(
                    select(Execution.run_id).where(Execution.execution_status == "committed")
                ).all()
            )
        # nothing to finish: a committed run is a done run

    def deliver(self, claim: Claim) -> None:
        if claim.run_id in self.done_at_start:
            self.cleanup(claim)  # "already done" before this start: just tidy the queue
            return
        super().deliver(claim)


def system() -> System:
    return mutant_system(
        "shared_done_flag",
        SharedDoneFlagWorker,
        expected_violation="no_silent_loss",
    )
