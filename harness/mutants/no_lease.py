"""Mutant ``no_lease``: claims without a lease or a fencing epoch.

Any worker takes any unsettled item, and its later updates overwrite whatever a rival wrote.
A worker paused past its claim (GC pause, SIGSTOP, a slow disk) wakes up and sends a message
a rival already delivered. A provider that dedupes by key hides the mistake; one that does
not (here the provider's window is zero) shows it as a second effect.
"""

from __future__ import annotations

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from harness.mutants._base import mutant_system
from harness.names import TERMINAL_STATES
from harness.reference.ledger import Claim, Ledger
from harness.reference.schema import Delivery, QueueItem
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class UnfencedLedger(Ledger):
    """Claims whatever is next and never checks who holds it."""

    def claim_next(self, *, only: str | None = None) -> Claim | None:
        now = self.now()
        with Session(self.engine) as s, s.begin():
            due = or_(
                and_(
                    Delivery.delivery_status.in_(("pending", "unknown")),
                    Delivery.next_attempt_at <= now,
                ),
                Delivery.delivery_status == "claimed",  # the mistake: a live claim is fair game
                Delivery.delivery_status.in_(tuple(TERMINAL_STATES)),
            )
            if only is not None:
                due = and_(due, Delivery.delivery_id == only)
            row = s.scalars(
                select(Delivery)
                .join(QueueItem, QueueItem.delivery_id == Delivery.delivery_id)
                .where(due)
                .order_by(Delivery.next_attempt_at, Delivery.delivery_id)
                .limit(1)
            ).first()
            if row is None:
                return None
            status_before = row.delivery_status
            if status_before not in TERMINAL_STATES:
                s.execute(
                    update(Delivery)
                    .where(Delivery.delivery_id == row.delivery_id)
                    .values(delivery_status="claimed", lease_owner=self.worker)
                )
            return Claim(
                delivery_id=row.delivery_id,
                run_id=row.run_id,
                destination=row.destination,
                body=row.body,
                recognizer=row.recognizer,
                idempotency_key=row.idempotency_key,
                status_before=status_before,
                attempt_count=row.attempt_count,
                first_attempt_at=row.first_attempt_at,
                key_window_s=row.key_window_s,
                provider_message_id=row.provider_message_id,
                epoch=row.lease_epoch,  # never bumped, so every "fenced" update matches
                created_at=row.created_at,
                claimed_at=now,
            )


class NoLeaseWorker(ReferenceWorker):
    """Claims without a lease; a worker woken late sends what a rival already sent."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = UnfencedLedger(self.engine, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "no_lease",
        NoLeaseWorker,
        expected_violation="exactly_once_effect",
        catching_scenario="mutant-no-lease",
    )
