"""Mutant ``new_key_per_attempt``: derives the idempotency key from the attempt number.

A common slip: the key is built where the request is built (``f"{id}-{attempt}"``), so every
retry looks new to the provider, and a lookup after a timeout asks about a key that was never
sent. The provider's dedupe cannot help, and a retry after an accepted-but-unanswered send
delivers twice.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class NewKeyPerAttemptWorker(ReferenceWorker):
    """Mints a new idempotency key for every attempt."""

    def key_for_attempt(self, claim: Claim, attempt: int) -> str:
        return f"{claim.idempotency_key}-a{attempt}"


def system() -> System:
    return mutant_system(
        "new_key_per_attempt",
        NewKeyPerAttemptWorker,
        expected_violation="stable_idempotency_key",
    )
