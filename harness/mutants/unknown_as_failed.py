"""Mutant ``unknown_as_failed``: a dropped reply or a timeout is recorded as ``failed`` and
never reconciled.

Two states collapsed into one: the worker has no ``unknown``, so "the provider may well have
accepted this" is written down as "this did not go out". The ledger then disagrees with the
recipient's inbox, and an operator who retries failed deliveries sends a duplicate. The
default workload's accept-then-drop exposes it in the baseline;
``accepted_reconciled_or_unknown`` must catch it.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim, Ledger
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class UnknownAsFailedLedger(Ledger):
    """Has no ``unknown`` state: an outcome it cannot tell is stored as a failure."""

    def persist_unknown(self, claim: Claim, error: str, *, retry_in: float) -> None:
        self.persist_terminal(claim, "failed", error)


class UnknownAsFailedWorker(ReferenceWorker):
    """Records a timeout or dropped reply as failed, so nothing ever reconciles it."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = UnknownAsFailedLedger(self.engine, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "unknown_as_failed",
        UnknownAsFailedWorker,
        expected_violation="accepted_reconciled_or_unknown",
    )
