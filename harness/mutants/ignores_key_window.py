"""Mutant ``ignores_key_window``: retries with the same key however long ago the first attempt
was.

The key is stable, which looks right; but providers forget keys after their window (24 h for
a payments API, 5 minutes for a FIFO queue). A retry after that is a fresh send to the
provider, and if the first attempt had in fact landed, a duplicate. The article's commenter:
"the key becomes decorative after the first long gap".
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class IgnoresKeyWindowWorker(ReferenceWorker):
    """Resends with the old key even after the provider's dedupe window has passed."""

    def within_window(self, claim: Claim) -> bool:
        return True


def system() -> System:
    return mutant_system(
        "ignores_key_window",
        IgnoresKeyWindowWorker,
        expected_violation="retry_within_window",
        catching_scenario="mutant-ignores-key-window",
    )
