"""Every durable step of the reference worker, one short transaction each.

Claims are fenced: taking a lease bumps ``lease_epoch``, and every later update of that
delivery names the epoch it holds. A worker that was paused past its lease and wakes up finds
its update matching no row and drops the item (``LeaseLostError``) instead of overwriting a
rival's result. PostgreSQL picks candidates with ``FOR UPDATE SKIP LOCKED``; SQLite serialises
writers with ``BEGIN IMMEDIATE``; the compare-and-set on the epoch is what makes both safe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Engine, and_, delete, insert, or_, select, update
from sqlalchemy.orm import Session

from harness.errors import LeaseLostError
from harness.names import TERMINAL_STATES
from harness.reference.schema import (
    AuditEvent,
    Delivery,
    Execution,
    QueueItem,
    RosterEntry,
    RunDestination,
    RunRequest,
)
from harness.worker_config import WorkerConfig


def delivery_identity(run_id: str, destination: str) -> str:
    """The durable identity of a delivery: derived from what it is, never from an attempt."""
    digest = hashlib.sha256(f"{run_id}\x1f{destination}".encode()).hexdigest()
    return f"dlv_{digest[:24]}"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    """A delivery this worker holds the lease for, as it was when claimed."""

    delivery_id: str
    run_id: str
    destination: str
    body: str
    recognizer: str
    idempotency_key: str
    status_before: str
    attempt_count: int
    first_attempt_at: float | None
    key_window_s: float
    provider_message_id: str | None
    epoch: int


class Ledger:
    """The reference system's view of its database."""

    def __init__(
        self, engine: Engine, config: WorkerConfig, *, clock: Callable[[], float] | None = None
    ) -> None:
        self.engine = engine
        self.config = config
        self.now = clock or config.clock().now
        self.worker = config.worker_name

    # -- execution ledger -------------------------------------------------------------------

    def pending_runs(self) -> list[RunRequest]:
        with Session(self.engine) as s:
            done = select(Execution.run_id).where(Execution.execution_status == "committed")
            rows = s.scalars(
                select(RunRequest).where(RunRequest.run_id.not_in(done)).order_by(RunRequest.run_id)
            ).all()
            s.expunge_all()
            return list(rows)

    def resolve_destinations(self, topic: str) -> list[str]:
        with Session(self.engine) as s:
            stmt = select(RosterEntry.destination).where(RosterEntry.topic == topic)
            return sorted(s.scalars(stmt).all())

    def commit_result(
        self, run: RunRequest, *, step_id: str, result_body: str, destinations: list[str]
    ) -> bool:
        """Commit the result and freeze its destinations together; False if already done."""
        now = self.now()
        with Session(self.engine) as s, s.begin():
            existing = s.get(Execution, (run.run_id, step_id))
            if existing is not None and existing.execution_status == "committed":
                return False
            if existing is not None:
                s.delete(existing)
                s.flush()
            s.add(
                Execution(
                    run_id=run.run_id,
                    step_id=step_id,
                    input_hash=sha256_hex(run.input_payload),
                    execution_status="committed",
                    result_ref=f"result:{run.run_id}:{step_id}",
                    result_body=result_body,
                    started_at=now,
                    finished_at=now,
                )
            )
            for dest in destinations:
                s.add(RunDestination(run_id=run.run_id, destination=dest))
        return True

    def runs_missing_deliveries(self) -> list[str]:
        """Committed runs with a frozen destination that has no delivery row yet."""
        with Session(self.engine) as s:
            stmt = (
                select(RunDestination.run_id)
                .outerjoin(
                    Delivery,
                    and_(
                        Delivery.run_id == RunDestination.run_id,
                        Delivery.destination == RunDestination.destination,
                    ),
                )
                .where(Delivery.delivery_id.is_(None))
                .distinct()
                .order_by(RunDestination.run_id)
            )
            return list(s.scalars(stmt).all())

    # -- enqueue ----------------------------------------------------------------------------

    def enqueue_deliveries(self, run_id: str) -> int:
        """Write one delivery row and queue item per frozen destination that lacks one."""
        now = self.now()
        created = 0
        with Session(self.engine) as s, s.begin():
            execution = s.scalars(select(Execution).where(Execution.run_id == run_id)).one()
            frozen = s.scalars(
                select(RunDestination.destination).where(RunDestination.run_id == run_id)
            ).all()
            have = set(
                s.scalars(select(Delivery.destination).where(Delivery.run_id == run_id)).all()
            )
            for dest in sorted(set(frozen) - have):
                self._insert_delivery(s, execution, dest, now=now)
                created += 1
        return created

    def _insert_delivery(
        self, s: Session, execution: Execution, dest: str, *, now: float, identity: str = ""
    ) -> Delivery:
        delivery_id = identity or delivery_identity(execution.run_id, dest)
        recognizer = f"ch-{delivery_id[4:16]}"
        body = f"{execution.result_body}\n\n[ref {recognizer}]"
        delivery = Delivery(
            delivery_id=delivery_id,
            run_id=execution.run_id,
            result_ref=execution.result_ref or "",
            destination=dest,
            payload_hash=sha256_hex(body),
            body=body,
            delivery_status="pending",
            idempotency_key=self.key_for(delivery_id),
            key_window_s=self.config.key_window_s,
            recognizer=recognizer,
            attempt_count=0,
            next_attempt_at=now,
            lease_epoch=0,
            credential_id=self.config.credential_id,
            destination_scope=self.config.destination_scope,
            created_at=now,
            created_by=self.worker,
        )
        s.add(delivery)
        s.add(QueueItem(delivery_id=delivery_id, enqueued_at=now))
        s.flush()
        self._audit(s, delivery, "enqueued", epoch=0)
        return delivery

    def key_for(self, delivery_id: str) -> str:
        """The idempotency key: a function of the delivery identity alone."""
        return f"ik-{delivery_id}"

    # -- claim ------------------------------------------------------------------------------

    def _due(self, now: float) -> ColumnElement[bool]:
        return or_(
            and_(
                Delivery.delivery_status.in_(("pending", "unknown")),
                Delivery.next_attempt_at <= now,
            ),
            and_(Delivery.delivery_status == "claimed", Delivery.lease_expires_at <= now),
            Delivery.delivery_status.in_(tuple(TERMINAL_STATES)),
        )

    def due_ids(self) -> list[str]:
        """Queue items that could be claimed now, in claim order."""
        with Session(self.engine) as s:
            stmt = (
                select(Delivery.delivery_id)
                .join(QueueItem, QueueItem.delivery_id == Delivery.delivery_id)
                .where(self._due(self.now()))
                .order_by(Delivery.next_attempt_at, Delivery.delivery_id)
            )
            return list(s.scalars(stmt).all())

    def claim_next(self, *, only: str | None = None) -> Claim | None:
        """Lease the next due queue item (or ``only`` that one), or None if none is due."""
        now = self.now()
        with Session(self.engine) as s, s.begin():
            due = self._due(now)
            if only is not None:
                due = and_(due, Delivery.delivery_id == only)
            stmt = (
                select(Delivery)
                .join(QueueItem, QueueItem.delivery_id == Delivery.delivery_id)
                .where(due)
                .order_by(Delivery.next_attempt_at, Delivery.delivery_id)
                .limit(1)
                .with_for_update(skip_locked=True, of=Delivery)
            )
            row = s.scalars(stmt).first()
            if row is None:
                return None
            epoch = row.lease_epoch + 1
            status_before = row.delivery_status
            if status_before not in TERMINAL_STATES:
                result = s.execute(
                    update(Delivery)
                    .where(
                        Delivery.delivery_id == row.delivery_id,
                        Delivery.lease_epoch == row.lease_epoch,
                    )
                    .values(
                        delivery_status="claimed",
                        lease_owner=self.worker,
                        lease_epoch=epoch,
                        lease_expires_at=now + self.config.lease_s,
                    )
                )
                if result.rowcount != 1:  # type: ignore[attr-defined]
                    return None
                self._audit(s, row, "claimed", epoch=epoch)
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
                epoch=epoch,
            )

    def next_wakeup(self) -> tuple[float | None, float | None] | None:
        """(earliest retry due, earliest lease lapse), or None once everything queued is settled.

        The two are kept apart because a worker may jump the clock to its own retry time but
        must never jump it past a rival's lease.
        """
        with Session(self.engine) as s:
            rows = s.execute(
                select(
                    Delivery.delivery_status, Delivery.next_attempt_at, Delivery.lease_expires_at
                ).join(QueueItem, QueueItem.delivery_id == Delivery.delivery_id)
            ).all()
        if not rows:
            return None
        due: list[float] = []
        leased: list[float] = []
        for status, next_at, lease_until in rows:
            if status in TERMINAL_STATES:
                due.append(self.now())
            elif status == "claimed":
                leased.append(lease_until if lease_until is not None else self.now())
            else:
                due.append(next_at)
        return (min(due) if due else None, min(leased) if leased else None)

    # -- fenced updates ---------------------------------------------------------------------

    def _fenced(
        self, claim: Claim, event: str, detail: dict[str, object] | None, **values: object
    ) -> None:
        with Session(self.engine) as s, s.begin():
            result = s.execute(
                update(Delivery)
                .where(
                    Delivery.delivery_id == claim.delivery_id,
                    Delivery.lease_epoch == claim.epoch,
                )
                .values(**values)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise LeaseLostError(f"{claim.delivery_id}: lease epoch {claim.epoch} superseded")
            row = s.get(Delivery, claim.delivery_id)
            assert row is not None
            self._audit(s, row, event, epoch=claim.epoch, detail=detail)

    def record_attempt(self, claim: Claim) -> int:
        """Durably count the attempt *before* sending, so a crash mid-send is never invisible."""
        attempt = claim.attempt_count + 1
        first = claim.first_attempt_at if claim.first_attempt_at is not None else self.now()
        self._fenced(
            claim,
            "attempt",
            {"attempt": attempt},
            attempt_count=attempt,
            first_attempt_at=first,
            lease_expires_at=self.now() + self.config.lease_s,
        )
        return attempt

    def persist_accepted(self, claim: Claim, provider_message_id: str, *, how: str) -> None:
        self._fenced(
            claim,
            how,
            {"provider_message_id": provider_message_id},
            provider_message_id=provider_message_id,
            last_error=None,
        )

    def persist_unknown(self, claim: Claim, error: str, *, retry_in: float) -> None:
        self._fenced(
            claim,
            "unknown",
            {"error": error},
            delivery_status="unknown",
            last_error=error,
            lease_owner=None,
            lease_expires_at=None,
            next_attempt_at=self.now() + retry_in,
        )

    def persist_retry(self, claim: Claim, error: str, *, retry_in: float) -> None:
        self._fenced(
            claim,
            "retry_scheduled",
            {"error": error, "retry_in": retry_in},
            delivery_status="pending",
            last_error=error,
            lease_owner=None,
            lease_expires_at=None,
            next_attempt_at=self.now() + retry_in,
        )

    def persist_terminal(self, claim: Claim, status: str, reason: str) -> None:
        """Settle as failed or review: no more automatic attempts."""
        self._fenced(
            claim,
            status,
            {"reason": reason},
            delivery_status=status,
            last_error=reason,
            lease_owner=None,
            lease_expires_at=None,
        )

    def acknowledge(self, claim: Claim) -> None:
        self._fenced(
            claim,
            "delivered",
            None,
            delivery_status="delivered",
            acknowledged_at=self.now(),
            lease_owner=None,
            lease_expires_at=None,
        )

    def waiting_ids(self) -> list[str]:
        """Deliveries due now that nobody holds: work a live worker should be doing."""
        with Session(self.engine) as s:
            stmt = (
                select(Delivery.delivery_id)
                .join(QueueItem, QueueItem.delivery_id == Delivery.delivery_id)
                .where(
                    self._due(self.now()),
                    Delivery.delivery_status.not_in(tuple(TERMINAL_STATES)),
                )
            )
            return list(s.scalars(stmt).all())

    def record_overdue(self, delivery_id: str, *, waited_s: float) -> None:
        """Say in the audit trail that a delivery sat due and untouched (an operator sees it)."""
        with Session(self.engine) as s, s.begin():
            row = s.get(Delivery, delivery_id)
            if row is not None:
                self._audit(s, row, "overdue", epoch=row.lease_epoch, detail={"waited_s": waited_s})

    def cleanup(self, delivery_id: str) -> None:
        """Remove the queue item only; the ledger row and audit trail stay."""
        with Session(self.engine) as s, s.begin():
            gone = s.execute(delete(QueueItem).where(QueueItem.delivery_id == delivery_id))
            row = s.get(Delivery, delivery_id)
            if row is not None and gone.rowcount:  # type: ignore[attr-defined]
                self._audit(s, row, "cleaned", epoch=row.lease_epoch)

    # -- audit ------------------------------------------------------------------------------

    def _audit(
        self,
        s: Session,
        row: Delivery,
        event: str,
        *,
        epoch: int,
        detail: dict[str, object] | None = None,
    ) -> None:
        s.execute(
            insert(AuditEvent).values(
                at=self.now(),
                delivery_id=row.delivery_id,
                run_id=row.run_id,
                event=event,
                worker=self.worker,
                lease_epoch=epoch,
                idempotency_key=row.idempotency_key,
                credential_id=row.credential_id,
                destination_scope=row.destination_scope,
                detail=json.dumps(detail) if detail else None,
            )
        )
