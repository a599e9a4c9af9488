"""Mutant ``blind_resend_after_timeout``: after a timeout it resends as a new request, without
asking the provider first.

The everyday reasoning: "the call timed out, so it failed; send it again". The resend gets a
fresh request id (so the provider's dedupe cannot recognise it) and no lookup is made. But a
timeout or a dropped reply says nothing about whether the provider accepted the first
request; when it had, the recipient gets the message twice. The default workload's
accept-then-drop exposes it in the baseline; ``exactly_once_effect`` must catch it.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class BlindResendWorker(ReferenceWorker):
    """Treats a timeout as a failure: no lookup, and the resend is a brand-new request."""

    def reconcile(self, claim: Claim) -> bool:
        return False  # never asks the provider what happened

    def key_for_attempt(self, claim: Claim, attempt: int) -> str:
        if claim.status_before == "unknown":
            return f"{claim.idempotency_key}:resend-{attempt}"
        return claim.idempotency_key


def system() -> System:
    return mutant_system(
        "blind_resend_after_timeout",
        BlindResendWorker,
        expected_violation="exactly_once_effect",
    )
