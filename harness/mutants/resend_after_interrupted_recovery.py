"""Mutant ``resend_after_interrupted_recovery``: safe after one crash, wrong after two.

It recovers correctly, but keeps a durable "recovery in progress" marker. If it starts and
finds that marker still set (the previous *recovery* crashed), it gives up on reconciling:
it assumes every send still in doubt failed, mints fresh keys and sends again. A single
crash at any boundary never shows it; only a second crash during recovery does. This is the
planted bug that ``explore`` must find and shrink to exactly two crashes.
"""

from __future__ import annotations

import os

from sqlalchemy import Boolean, Column, Engine, Integer, MetaData, Table, select, update
from sqlalchemy.orm import Session

from harness.mutants._base import mutant_system
from harness.reference import schema
from harness.reference.schema import Delivery
from harness.reference.worker import ReferenceWorker
from harness.systems import System

_META = MetaData()
_MARKER = Table(
    "recovery_marker",
    _META,
    Column("id", Integer, primary_key=True),
    Column("in_progress", Boolean, nullable=False),
    Column("owner_pid", Integer, nullable=True),
)


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class InterruptedRecoveryWorker(ReferenceWorker):
    """Blindly resends, with new keys, whatever was in doubt when a recovery was interrupted."""

    def run(self) -> None:
        with Session(self.engine) as s, s.begin():
            in_doubt = s.scalars(
                select(Delivery).where(
                    Delivery.delivery_status.in_(("claimed", "unknown")),
                    Delivery.attempt_count > 0,
                )
            ).all()
            marker = s.execute(
                select(_MARKER.c.in_progress, _MARKER.c.owner_pid).where(_MARKER.c.id == 1)
            ).one()
            # "Interrupted" means: a recovery was started by a process that is gone.
            if in_doubt and marker.in_progress and not _alive(marker.owner_pid):
                for row in in_doubt:  # the mistake: "the last recovery died, start over"
                    row.attempt_count = 0
                    row.idempotency_key = f"{row.idempotency_key}-r{row.lease_epoch}"
                    row.provider_message_id = None
                    row.delivery_status = "pending"
                    row.lease_expires_at = None
            if in_doubt and not (marker.in_progress and _alive(marker.owner_pid)):
                s.execute(
                    update(_MARKER)
                    .where(_MARKER.c.id == 1)
                    .values(in_progress=True, owner_pid=os.getpid())
                )
        super().run()
        with Session(self.engine) as s, s.begin():
            s.execute(
                update(_MARKER)
                .where(_MARKER.c.id == 1, _MARKER.c.owner_pid == os.getpid())
                .values(in_progress=False, owner_pid=None)
            )


def _prepare(engine: Engine) -> None:
    schema.Base.metadata.create_all(engine)
    _META.create_all(engine)
    with engine.begin() as conn:
        conn.execute(_MARKER.insert().values(id=1, in_progress=False))


def system() -> System:
    return mutant_system(
        "resend_after_interrupted_recovery",
        InterruptedRecoveryWorker,
        expected_violation="exactly_once_effect",
        catching_scenario="mutant-resend-after-interrupted-recovery",
        prepare=_prepare,
    )
