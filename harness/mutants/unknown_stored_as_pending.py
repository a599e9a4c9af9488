"""Mutant ``unknown_stored_as_pending``: a lost reply is stored as ``pending``, like a 503.

One status value for two truths: "never went out, try again" and "may well have gone out".
The worker still knows better (it reconciles before any resend, since an attempt is on
record), so nothing is sent twice and every delivery ends ``delivered``; but while the reply
is in doubt an operator's ``WHERE delivery_status = 'unknown'`` finds nothing, and one who
cancels pending deliveries cancels a message its recipient already has. Only the ledger's
status history (a database trigger, not the worker) shows the collapse; the default
workload's accept-then-drop exposes it in the baseline. ``states_distinguishable`` must
catch it.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim, Ledger
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class UnknownStoredAsPendingLedger(Ledger):
    """Writes an ambiguous outcome down as a plain retry."""

    def persist_unknown(self, claim: Claim, error: str, *, retry_in: float) -> None:
        self.persist_retry(claim, error, retry_in=retry_in)


class UnknownStoredAsPendingWorker(ReferenceWorker):
    """Stores unknown outcomes as pending (it still reconciles before resending)."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = UnknownStoredAsPendingLedger(self.engine, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "unknown_stored_as_pending",
        UnknownStoredAsPendingWorker,
        expected_violation="states_distinguishable",
    )
