"""Mutant ``transcript_rebuild``: recreates delivery items from the run transcript on start-up.

The seed article's opening bug. On every start the worker walks the committed runs (the
"transcript") and mints a fresh delivery for every destination not yet marked delivered,
without asking whether a pending item already exists. After a crash, the old pending item and
the rebuilt one are both sent.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from harness.mutants._base import mutant_system
from harness.reference import schema
from harness.reference.schema import Delivery, Execution, RunDestination
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class TranscriptRebuildWorker(ReferenceWorker):
    """Rebuilds deliveries from the transcript on start-up, with a fresh identity each time."""

    def recover(self) -> None:
        now = self.ledger.now()
        with Session(self.engine) as s, s.begin():
            for execution in s.scalars(
                select(Execution).where(Execution.execution_status == "committed")
            ).all():
                delivered = set(
                    s.scalars(
                        select(Delivery.destination).where(
                            Delivery.run_id == execution.run_id,
                            Delivery.delivery_status == "delivered",
                        )
                    ).all()
                )
                for dest in s.scalars(
                    select(RunDestination.destination).where(
                        RunDestination.run_id == execution.run_id
                    )
                ).all():
                    if dest not in delivered:
                        self.ledger._insert_delivery(
                            s, execution, dest, now=now, identity=f"dlv_{uuid.uuid4().hex[:24]}"
                        )
        super().recover()


def _prepare(engine: Engine) -> None:
    schema.Base.metadata.create_all(engine)
    with engine.begin() as conn:
        # The mistake needs room to happen: no uniqueness on (run, destination).
        conn.execute(text("DROP INDEX uq_delivery_identity"))


def system() -> System:
    return mutant_system(
        "transcript_rebuild",
        TranscriptRebuildWorker,
        expected_violation="no_restart_duplicates",
        prepare=_prepare,
    )
