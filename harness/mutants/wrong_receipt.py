"""Mutant ``wrong_receipt``: marks a delivery ``delivered`` with its own delivery id where the
provider's message id belongs.

"We already have an id for this message": the worker files its own delivery id as the
receipt and drops the id the provider returned. Every count still agrees (one effect, one
``delivered`` row), but the receipt is lost for good: nobody can look the message up at the
provider, refund it or match a bounce to it. Only comparing the stored id with the one in
the provider's log shows it; ``delivered_has_receipt`` must catch it in the baseline.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim, Ledger
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class WrongReceiptLedger(Ledger):
    """Stores the delivery's own id as the provider's message id."""

    def persist_accepted(self, claim: Claim, provider_message_id: str, *, how: str) -> None:
        super().persist_accepted(claim, claim.delivery_id, how=how)


class WrongReceiptWorker(ReferenceWorker):
    """Keeps its own delivery id as the receipt, not the id the provider returned."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = WrongReceiptLedger(None, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "wrong_receipt", WrongReceiptWorker, expected_violation="delivered_has_receipt"
    )
