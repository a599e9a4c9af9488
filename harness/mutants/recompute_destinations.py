"""Mutant ``recompute_destinations``: on restart, re-resolves a run's destinations from the
*current* roster instead of the list frozen at commit.

Every per-destination identity stays unique, so the one-identity checks pass; but after a
roster change between the crash and the restart, a newcomer receives a message about work
done before they joined, and someone who left loses theirs. The seed article's commenter
asked for exactly this crash-injection slot.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from harness import boundary
from harness.mutants._base import mutant_system
from harness.reference.schema import Delivery, Execution, RunRequest
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class RecomputeDestinationsWorker(ReferenceWorker):
    """Recomputes the destination list from the roster on restart."""

    def recover(self) -> None:
        for run_id in self.ledger.runs_missing_deliveries():
            with Session(self.engine) as s:
                run = s.get(RunRequest, run_id)
                assert run is not None
                topic = run.topic
            # The mistake: the roster of *now*, not the list frozen at commit.
            current = self.ledger.resolve_destinations(topic)
            now = self.ledger.now()
            with Session(self.engine) as s, s.begin():
                execution = s.scalars(select(Execution).where(Execution.run_id == run_id)).one()
                have = set(
                    s.scalars(select(Delivery.destination).where(Delivery.run_id == run_id)).all()
                )
                for dest in sorted(set(current) - have):
                    self.ledger._insert_delivery(s, execution, dest, now=now)
            boundary("after_delivery_enqueue")


def system() -> System:
    return mutant_system(
        "recompute_destinations",
        RecomputeDestinationsWorker,
        expected_violation="frozen_destinations",
        catching_scenario="mutant-recompute-destinations",
    )
