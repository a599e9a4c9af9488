"""Mutant ``ignores_retry_after``: a throttled send is retried at once, whatever the provider's
``Retry-After`` said.

"The HTTP client backs off for us": the worker schedules every retry a millisecond later
and never reads the answer's ``Retry-After``. Against a real provider the retry is throttled
again, attempts are burnt and the credential's rate limit with them; nothing in the ledger
shows it, every delivery still settles. ``retry_after_honoured`` must catch it from the
provider's log: in ``mutant-ignores-retry-after`` the first send gets ``429 Retry-After: 1``
and the retry arrives well inside that second.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim, Ledger
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig

#: how soon the mutant retries, seconds
RETRY_IN_S = 0.001


class RetryAtOnceLedger(Ledger):
    """Schedules every retry a millisecond out."""

    def persist_retry(self, claim: Claim, error: str, *, retry_in: float) -> None:
        super().persist_retry(claim, error, retry_in=RETRY_IN_S)


class IgnoresRetryAfterWorker(ReferenceWorker):
    """Retries a throttled send 1 ms later, ignoring Retry-After and its own backoff."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = RetryAtOnceLedger(None, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "ignores_retry_after",
        IgnoresRetryAfterWorker,
        expected_violation="retry_after_honoured",
        catching_scenario="mutant-ignores-retry-after",
    )
