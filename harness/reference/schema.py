"""Tables of the reference system, as SPEC.md names them.

The delivery *ledger* is never cleaned up; the *queue* is, and may be. The audit table is
append-only. Times are POSIX seconds (floats) so SQLite and PostgreSQL compare them alike.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Float, Index, Integer, String, Text, event
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from harness.intake import IntakeBase, RosterEntry, RunRequest

__all__ = [
    "AuditEvent",
    "Base",
    "Delivery",
    "Execution",
    "QueueItem",
    "RosterEntry",
    "RunDestination",
    "RunRequest",
    "StatusChange",
]


class Base(DeclarativeBase):
    pass


#: the harness's intake tables, in this metadata too: one ``create_all`` makes the whole case
#: database (they stay mapped to ``harness.intake``'s classes, re-exported here)
for _intake in IntakeBase.metadata.sorted_tables:
    _intake.to_metadata(Base.metadata)


class Execution(Base):
    """Execution ledger: one row per step."""

    __tablename__ = "executions"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    step_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    input_hash: Mapped[str] = mapped_column(String(64))
    execution_status: Mapped[str] = mapped_column(String(16))
    result_ref: Mapped[str | None] = mapped_column(String(200))
    result_body: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class RunDestination(Base):
    """The destination list, frozen in the transaction that commits the result."""

    __tablename__ = "run_destinations"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    destination: Mapped[str] = mapped_column(String(200), primary_key=True)


class Delivery(Base):
    """Delivery ledger: one row per intended destination, never deleted."""

    __tablename__ = "deliveries"
    delivery_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    result_ref: Mapped[str] = mapped_column(String(200))
    destination: Mapped[str] = mapped_column(String(200))
    payload_hash: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    delivery_status: Mapped[str] = mapped_column(String(16))
    idempotency_key: Mapped[str] = mapped_column(String(128))
    key_window_s: Mapped[float] = mapped_column(Float)
    recognizer: Mapped[str] = mapped_column(String(64))
    provider_message_id: Mapped[str | None] = mapped_column(String(128))
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    first_attempt_at: Mapped[float | None] = mapped_column(Float)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0)
    lease_expires_at: Mapped[float | None] = mapped_column(Float)
    acknowledged_at: Mapped[float | None] = mapped_column(Float)
    credential_id: Mapped[str] = mapped_column(String(64))
    destination_scope: Mapped[str] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(64))

    __table_args__ = (Index("uq_delivery_identity", "run_id", "destination", unique=True),)


class QueueItem(Base):
    """The durable delivery queue; an item is removed once its delivery is settled."""

    __tablename__ = "delivery_queue"
    delivery_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    enqueued_at: Mapped[float] = mapped_column(Float)


class AuditEvent(Base):
    """Append-only trail of every decision about a delivery, with credential and scope."""

    __tablename__ = "delivery_events"
    event_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    delivery_id: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(32))
    worker: Mapped[str] = mapped_column(String(64))
    lease_epoch: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str | None] = mapped_column(String(128))
    credential_id: Mapped[str | None] = mapped_column(String(64))
    destination_scope: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)


class StatusChange(Base):
    """Every status a delivery row has held, written by a database trigger, not the worker.

    The checkers read it to judge whether an operator could have told the states apart at
    any moment, not only at the end (a worker that writes ``pending`` where it means
    ``unknown`` still reconciles, and ends ``delivered``). Being a trigger, it records what
    any code, the worker's or a mutant's, wrote to ``deliveries.delivery_status``.
    """

    __tablename__ = "delivery_status_history"
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(String(64))
    delivery_status: Mapped[str] = mapped_column(String(16))
    attempt_count: Mapped[int] = mapped_column(Integer)
    lease_epoch: Mapped[int] = mapped_column(Integer)


_HISTORY_COLUMNS = "delivery_id, delivery_status, attempt_count, lease_epoch"
_HISTORY_VALUES = "NEW.delivery_id, NEW.delivery_status, NEW.attempt_count, NEW.lease_epoch"
_SQLITE_TRIGGERS = (
    "CREATE TRIGGER delivery_status_on_insert AFTER INSERT ON deliveries BEGIN"
    f" INSERT INTO delivery_status_history ({_HISTORY_COLUMNS}) VALUES ({_HISTORY_VALUES});"
    " END",
    "CREATE TRIGGER delivery_status_on_update AFTER UPDATE OF delivery_status ON deliveries"
    " WHEN NEW.delivery_status IS NOT OLD.delivery_status BEGIN"
    f" INSERT INTO delivery_status_history ({_HISTORY_COLUMNS}) VALUES ({_HISTORY_VALUES});"
    " END",
)
# The history table is named in the trigger's own schema: the harness restores a backup
# through a connection whose search path is not the case's.
_POSTGRES_TRIGGERS = (
    "CREATE FUNCTION delivery_status_history_fn() RETURNS trigger LANGUAGE plpgsql AS $fn$"
    " BEGIN"
    " IF TG_OP = 'INSERT' OR NEW.delivery_status IS DISTINCT FROM OLD.delivery_status THEN"
    " EXECUTE 'INSERT INTO ' || quote_ident(TG_TABLE_SCHEMA) || '.delivery_status_history"
    f" ({_HISTORY_COLUMNS}) VALUES ($1, $2, $3, $4)' USING {_HISTORY_VALUES};"
    " END IF; RETURN NULL; END $fn$",
    "CREATE TRIGGER delivery_status_history AFTER INSERT OR UPDATE OF delivery_status"
    " ON deliveries FOR EACH ROW EXECUTE FUNCTION delivery_status_history_fn()",
)


def _install_history_triggers(_target: object, connection: Connection, **kw: Any) -> None:
    """Create the triggers after ``create_all`` made both tables (a ``create_all`` of other
    tables only, e.g. a user system's intake tables, makes none)."""
    made = set(kw.get("tables") or ())
    if not {Delivery.__table__, StatusChange.__table__} <= made:
        return
    statements = {"sqlite": _SQLITE_TRIGGERS, "postgresql": _POSTGRES_TRIGGERS}
    for statement in statements.get(connection.dialect.name, ()):
        connection.exec_driver_sql(statement)


event.listen(Base.metadata, "after_create", _install_history_triggers)
