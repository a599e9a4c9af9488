"""Mutant ``cleanup_deletes_ledger``: cleanup deletes the delivery's ledger row together with
its queue item.

"Keep the table small": once a delivery is settled, the tidy-minded worker removes every
trace of it, not just the queue item. The queue may be cleaned up; the ledger may not. With
the row gone, nobody can answer "did this go out, to whom, with which key", and a restart
that consults the ledger finds nothing to stop it re-enqueueing. The audit trail and the
provider still know the delivery, so ``audit_survives_cleanup`` must catch it.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.orm import Session

from harness import boundary
from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.schema import Delivery, QueueItem
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class CleanupDeletesLedgerWorker(ReferenceWorker):
    """Removes the ledger row along with the queue item once a delivery is settled."""

    def cleanup(self, claim: Claim) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(delete(QueueItem).where(QueueItem.delivery_id == claim.delivery_id))
            s.execute(delete(Delivery).where(Delivery.delivery_id == claim.delivery_id))
        boundary("after_cleanup")


def system() -> System:
    return mutant_system(
        "cleanup_deletes_ledger",
        CleanupDeletesLedgerWorker,
        expected_violation="audit_survives_cleanup",
    )
