"""Mutant ``ack_before_send``: acknowledges and cleans up the item before sending it.

It looks efficient (one less round trip after the send) and passes every happy-path test. A
crash between the acknowledgement and the send, or any failed send, leaves a ledger that says
``delivered`` for a message no provider ever accepted.
"""

from __future__ import annotations

from harness import boundary
from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class AckBeforeSendWorker(ReferenceWorker):
    """Marks the delivery delivered, removes the queue item, then sends."""

    def deliver(self, claim: Claim) -> None:
        if claim.status_before in ("delivered", "failed", "review"):
            self.cleanup(claim)
            return
        boundary("after_claim")
        self.ledger.record_attempt(claim)
        self.ledger.acknowledge(claim)
        boundary("after_ack")
        self.cleanup(claim)
        result = self.provider.send(
            key=claim.idempotency_key,
            destination=claim.destination,
            run_id=claim.run_id,
            delivery_id=claim.delivery_id,
            body=claim.body,
            recognizer=claim.recognizer,
        )
        boundary("after_provider_accept")
        del result  # the outcome no longer matters to this worker: it already said "done"
        boundary("after_response_persisted")


def system() -> System:
    return mutant_system(
        "ack_before_send",
        AckBeforeSendWorker,
        expected_violation="exactly_once_effect",
    )
