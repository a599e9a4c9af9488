"""Mutant ``gives_up_on_throttle``: a 503 or a 429 ends the delivery as ``failed``.

"The provider said no": the worker files a temporary answer (overloaded, throttled, try
again later) as a final one, with attempts left. The row is ``failed`` with a reason, so a
count of settled states is satisfied and an operator sees an honest-looking failure; but the
provider asked to be asked again and nobody will, so the message is lost. The default
workload's 503 exposes it in the baseline; ``no_silent_loss`` must name it
(``gave_up_on_a_temporary_answer``).
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim, Ledger
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class GivesUpLedger(Ledger):
    """Records "try again later" as a final failure."""

    def persist_retry(self, claim: Claim, error: str, *, retry_in: float) -> None:
        self.persist_terminal(claim, "failed", error)


class GivesUpOnThrottleWorker(ReferenceWorker):
    """Fails a delivery on its first 503 or 429 though attempts are left."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = GivesUpLedger(None, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "gives_up_on_throttle", GivesUpOnThrottleWorker, expected_violation="no_silent_loss"
    )
