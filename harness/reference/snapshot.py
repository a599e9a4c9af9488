"""Read the reference schema into the plain rows the checkers expect (the ledger adapter).

Plain SQL over the ``schema`` tables: the harness reads a new ledger for every case, and
building and compiling ORM queries for each one cost more than the reading itself.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, inspect

from harness.snapshot import AuditRow, DeliveryRow, LedgerSnapshot, StatusChange, body_hash

_DELIVERY_FIELDS = (
    "delivery_id",
    "run_id",
    "destination",
    "delivery_status",
    "idempotency_key",
    "provider_message_id",
    "attempt_count",
    "created_by",
    "created_at",
    "credential_id",
    "destination_scope",
    "first_attempt_at",
    "next_attempt_at",
    "acknowledged_at",
    "key_window_s",
    "last_error",
    "lease_expires_at",
)
_AUDIT_FIELDS = (
    "event_id",
    "delivery_id",
    "run_id",
    "event",
    "worker",
    "at",
    "idempotency_key",
    "credential_id",
    "destination_scope",
    "detail",
)


def read_ledger(engine: Engine) -> LedgerSnapshot:
    with engine.connect() as conn:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(row) for row in conn.exec_driver_sql(sql)]

        committed = frozenset(
            str(run_id)
            for (run_id,) in rows(
                "SELECT run_id FROM executions WHERE execution_status = 'committed'"
            )
        )
        frozen: dict[str, list[str]] = {}
        for run_id, dest in rows("SELECT run_id, destination FROM run_destinations"):
            frozen.setdefault(str(run_id), []).append(str(dest))
        # The body is read only to hash it as the providers do (``body_hash``): the content
        # a provider received is compared with it, not shown.
        deliveries = tuple(
            DeliveryRow(
                **dict(zip(_DELIVERY_FIELDS, row[:-1], strict=True)),
                body_hash=None if row[-1] is None else body_hash(str(row[-1])),
            )
            for row in rows(
                f"SELECT {', '.join(_DELIVERY_FIELDS)}, body FROM deliveries ORDER BY created_at"
            )
        )
        queue = frozenset(str(d) for (d,) in rows("SELECT delivery_id FROM delivery_queue"))
        # The query an operator's dashboard would run; states_distinguishable checks that it
        # agrees with the rows, so a state that only exists row by row cannot hide.
        state_counts = {
            str(status): int(n)
            for status, n in rows(
                "SELECT delivery_status, COUNT(*) FROM deliveries GROUP BY delivery_status"
            )
        }
        audit = tuple(
            AuditRow(**dict(zip(_AUDIT_FIELDS, row, strict=True)))
            for row in rows(
                f"SELECT {', '.join(_AUDIT_FIELDS)} FROM delivery_events ORDER BY event_id"
            )
        )
        history: tuple[StatusChange, ...] | None = None
        if inspect(conn).has_table("delivery_status_history"):
            history = tuple(
                StatusChange(*row)
                for row in rows(
                    "SELECT seq, delivery_id, delivery_status, attempt_count, lease_epoch"
                    " FROM delivery_status_history ORDER BY seq"
                )
            )
    return LedgerSnapshot(
        committed_runs=committed,
        frozen_destinations={k: tuple(sorted(v)) for k, v in frozen.items()},
        deliveries=deliveries,
        queue=queue,
        audit=audit,
        state_counts=state_counts,
        status_history=history,
    )
