"""Mutant ``sends_again_under_new_ids``: once the provider accepted a delivery, sends the same
message to the same recipient once more under a run id, delivery id and key of its own.

A mistake of glue, not of the outbox: a "copy to the audit channel", a test send left in, a
retry wrapper that mints its own request ids. Each intended delivery is sent once correctly
and once more under identities nobody intended, so no (run, recipient) pair is reached twice:
``exactly_once_effect`` counts per pair and sees nothing wrong, the ledger is green, and
every recipient got the message twice. Only placing every accepted effect on an intended
delivery shows it; ``no_unintended_effect`` must catch it in the baseline.
"""

from __future__ import annotations

import hashlib

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


def made_up(kind: str, claim: Claim) -> str:
    """An id of the worker's own for ``claim``: fresh to the provider and to the intent, and
    the same in every run of the seed (a rerun compares like with like)."""
    digest = hashlib.sha256(f"again:{kind}:{claim.delivery_id}".encode()).hexdigest()
    return f"{kind}_{digest[:20]}"


class SendsAgainUnderNewIdsWorker(ReferenceWorker):
    """Sends each accepted delivery once more under made-up run, delivery and key."""

    def finish(self, claim: Claim) -> None:
        if claim.provider_message_id is None:  # accepted just now, not settled before a crash
            self.adapter_for(claim).send(
                key=made_up("key", claim),
                destination=claim.destination,
                run_id=made_up("run", claim),
                delivery_id=made_up("dlv", claim),
                body=claim.body,
                recognizer=claim.recognizer,
            )
        super().finish(claim)


def system() -> System:
    return mutant_system(
        "sends_again_under_new_ids",
        SendsAgainUnderNewIdsWorker,
        expected_violation="no_unintended_effect",
    )
