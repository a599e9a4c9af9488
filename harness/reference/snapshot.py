"""Read the reference schema into the plain rows the checkers expect (the ledger adapter)."""

from __future__ import annotations

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from harness.invariants import AuditRow, DeliveryRow, LedgerSnapshot
from harness.reference.schema import (
    AuditEvent,
    Delivery,
    Execution,
    QueueItem,
    RunDestination,
)


def read_ledger(engine: Engine) -> LedgerSnapshot:
    with Session(engine) as s:
        committed = frozenset(
            s.scalars(
                select(Execution.run_id).where(Execution.execution_status == "committed")
            ).all()
        )
        frozen: dict[str, list[str]] = {}
        for run_id, dest in s.execute(select(RunDestination.run_id, RunDestination.destination)):
            frozen.setdefault(run_id, []).append(dest)
        deliveries = tuple(
            DeliveryRow(
                delivery_id=d.delivery_id,
                run_id=d.run_id,
                destination=d.destination,
                delivery_status=d.delivery_status,
                idempotency_key=d.idempotency_key,
                provider_message_id=d.provider_message_id,
                attempt_count=d.attempt_count,
                created_by=d.created_by,
                created_at=d.created_at,
                credential_id=d.credential_id,
                destination_scope=d.destination_scope,
                first_attempt_at=d.first_attempt_at,
                next_attempt_at=d.next_attempt_at,
                acknowledged_at=d.acknowledged_at,
                key_window_s=d.key_window_s,
                last_error=d.last_error,
                lease_expires_at=d.lease_expires_at,
            )
            for d in s.scalars(select(Delivery).order_by(Delivery.created_at)).all()
        )
        queue = frozenset(s.scalars(select(QueueItem.delivery_id)).all())
        # The query an operator's dashboard would run; states_distinguishable checks that it
        # agrees with the rows, so a state that only exists row by row cannot hide.
        state_counts = {
            str(status): int(n)
            for status, n in s.execute(
                select(Delivery.delivery_status, func.count()).group_by(Delivery.delivery_status)
            )
        }
        audit = tuple(
            AuditRow(
                event_id=a.event_id,
                delivery_id=a.delivery_id,
                run_id=a.run_id,
                event=a.event,
                worker=a.worker,
                at=a.at,
                idempotency_key=a.idempotency_key,
                credential_id=a.credential_id,
                destination_scope=a.destination_scope,
                detail=a.detail,
            )
            for a in s.scalars(select(AuditEvent).order_by(AuditEvent.event_id)).all()
        )
    return LedgerSnapshot(
        committed_runs=committed,
        frozen_destinations={k: tuple(sorted(v)) for k, v in frozen.items()},
        deliveries=deliveries,
        queue=queue,
        audit=audit,
        state_counts=state_counts,
    )
