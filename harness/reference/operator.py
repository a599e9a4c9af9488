"""The operator's view of a reference-schema delivery ledger: what is where, and settling it.

``ledger_status`` counts deliveries per state (``pending``, ``claimed``, ``delivered``,
``failed``, ``unknown``, ``review``) with their ages, and flags **overdue** ones: pending or
unknown with ``next_attempt_at`` older than now - grace (the worker should have acted by
then), or claimed with an expired lease (the worker holding it is gone). ``resolve`` settles a
``review`` or ``unknown`` delivery as ``delivered`` or ``failed`` and writes who and why into
the append-only audit trail (event ``resolved_by_operator``), fencing off any worker that
still holds a lease epoch on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine, delete, insert, inspect, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from harness import db
from harness.errors import BadInputError
from harness.names import DELIVERY_STATES
from harness.reference.schema import AuditEvent, Delivery, QueueItem

#: states an operator may settle, and what they may settle them as
RESOLVABLE: Final = ("review", "unknown")
OUTCOMES: Final = ("delivered", "failed")
AUDIT_EVENT: Final = "resolved_by_operator"
DEFAULT_GRACE_S: Final = 60.0


class UnknownDeliveryError(BadInputError):
    """No delivery with this id in the ledger."""


class NotResolvableError(BadInputError):
    """The delivery is in a state an operator must not override."""


class LedgerUnavailableError(BadInputError):
    """The database is there but holds no readable delivery ledger."""


@dataclass(frozen=True)
class DeliveryView:
    delivery_id: str
    run_id: str
    destination: str
    state: str
    attempts: int
    age_s: float
    overdue: bool
    overdue_by_s: float | None
    next_attempt_at: float | None
    lease_owner: str | None
    lease_expires_at: float | None
    last_error: str | None


def connect(url: str, *, schema: str | None = None) -> Engine:
    """Open the ledger at ``url`` or raise a ``BadInputError`` that says why it cannot be."""
    url = db.normalise_url(url)
    shown = make_url(url).render_as_string(hide_password=True)
    if url.startswith("sqlite"):
        database = make_url(url).database
        if not database or database == ":memory:" or not Path(database).is_file():
            raise LedgerUnavailableError(f"--db: no SQLite ledger file at {database or shown}")
    else:
        db.check_reachable(url)
    engine = db.open_engine(url, schema=schema)
    try:
        with engine.connect() as conn:
            found = inspect(conn).has_table(Delivery.__tablename__)
    except DBAPIError as exc:
        engine.dispose()
        raise LedgerUnavailableError(f"--db: cannot read {shown}: {_reason(exc)}") from None
    if not found:
        engine.dispose()
        where = f"schema {schema!r} of {shown}" if schema else shown
        raise LedgerUnavailableError(
            f"--db: no delivery ledger (table {Delivery.__tablename__!r}) in {where}"
        )
    return engine


def _reason(exc: DBAPIError) -> str:
    text = str(exc.orig).strip() if exc.orig is not None else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _view(row: Delivery, *, now: float, grace_s: float) -> DeliveryView:
    overdue_by: float | None = None
    if row.delivery_status in ("pending", "unknown") and row.next_attempt_at is not None:
        late = now - row.next_attempt_at
        if late > grace_s:
            overdue_by = late
    elif row.delivery_status == "claimed" and row.lease_expires_at is not None:
        late = now - row.lease_expires_at
        if late > 0:
            overdue_by = late
    return DeliveryView(
        delivery_id=row.delivery_id,
        run_id=row.run_id,
        destination=row.destination,
        state=row.delivery_status,
        attempts=row.attempt_count,
        age_s=max(0.0, now - row.created_at),
        overdue=overdue_by is not None,
        overdue_by_s=overdue_by,
        next_attempt_at=row.next_attempt_at,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        last_error=row.last_error,
    )


def ledger_status(
    engine: Engine, *, now: float, grace_s: float = DEFAULT_GRACE_S
) -> dict[str, Any]:
    """Counts and ages per state, the overdue items, and every delivery's view.

    ``states`` always lists the six documented states (count 0 if none), then any other value
    found in the ledger; ``deliveries`` is ordered: overdue first, then by state and age.
    """
    with Session(engine) as s:
        rows = s.scalars(select(Delivery).order_by(Delivery.created_at)).all()
        views = [_view(r, now=now, grace_s=grace_s) for r in rows]
    states: dict[str, dict[str, Any]] = {
        state: {"count": 0, "oldest_age_s": None, "newest_age_s": None} for state in DELIVERY_STATES
    }
    for v in views:
        entry = states.setdefault(v.state, {"count": 0, "oldest_age_s": None, "newest_age_s": None})
        entry["count"] += 1
        entry["oldest_age_s"] = max(entry["oldest_age_s"] or 0.0, v.age_s)
        entry["newest_age_s"] = (
            v.age_s if entry["newest_age_s"] is None else min(entry["newest_age_s"], v.age_s)
        )
    overdue = [v for v in views if v.overdue]
    rank = {state: i for i, state in enumerate(DELIVERY_STATES)}
    views.sort(key=lambda v: (not v.overdue, rank.get(v.state, len(rank)), -v.age_s))
    return {
        "now": now,
        "grace_s": grace_s,
        "total": len(views),
        "states": states,
        "overdue": {
            "count": len(overdue),
            "max_overdue_s": max((v.overdue_by_s or 0.0 for v in overdue), default=None),
            "by_state": {
                st: sum(1 for v in overdue if v.state == st) for st in {v.state for v in overdue}
            },
        },
        "deliveries": [asdict(v) for v in views],
    }


def needs_attention(view: dict[str, Any]) -> bool:
    """Overdue, or waiting on a decision (``unknown``, ``review``)."""
    return bool(view["overdue"]) or view["state"] in RESOLVABLE


def resolve(
    engine: Engine,
    delivery_id: str,
    *,
    outcome: str,
    note: str,
    operator: str,
    now: float,
) -> dict[str, Any]:
    """Settle a ``review``/``unknown`` delivery as ``outcome`` and audit who and why.

    One transaction: the row is re-read under lock, the state is compare-and-set (a worker
    that changed it meanwhile makes this fail, never overwritten), the lease epoch is bumped
    so a worker still holding the old one loses its fenced updates, the queue item goes, and
    the audit row records operator, note and the previous state.
    """
    if outcome not in OUTCOMES:
        raise BadInputError(f"--as: {outcome!r}; an operator resolves as delivered or failed")
    if not note.strip():
        raise BadInputError("--note: say why (it is kept in the audit trail)")
    with Session(engine) as s, s.begin():
        row = s.scalars(
            select(Delivery).where(Delivery.delivery_id == delivery_id).with_for_update()
        ).one_or_none()
        if row is None:
            raise UnknownDeliveryError(f"no delivery {delivery_id!r} in this ledger")
        previous = row.delivery_status
        if previous not in RESOLVABLE:
            raise NotResolvableError(
                f"delivery {delivery_id} is {previous!r}; an operator may only resolve a"
                f" delivery in {' or '.join(RESOLVABLE)}"
            )
        epoch = row.lease_epoch + 1
        values: dict[str, Any] = {
            "delivery_status": outcome,
            "lease_owner": None,
            "lease_expires_at": None,
            "lease_epoch": epoch,
        }
        if outcome == "delivered":
            values["acknowledged_at"] = now
        changed = s.execute(
            update(Delivery)
            .where(
                Delivery.delivery_id == delivery_id,
                Delivery.delivery_status == previous,
                Delivery.lease_epoch == row.lease_epoch,
            )
            .values(**values)
        )
        if changed.rowcount != 1:  # type: ignore[attr-defined]
            raise NotResolvableError(
                f"delivery {delivery_id} changed while it was being resolved; look again"
            )
        gone = s.execute(delete(QueueItem).where(QueueItem.delivery_id == delivery_id))
        detail = {
            "operator": operator,
            "note": note,
            "previous_state": previous,
            "resolved_as": outcome,
            "queue_item_removed": bool(gone.rowcount),  # type: ignore[attr-defined]
        }
        inserted = s.execute(
            insert(AuditEvent)
            .values(
                at=now,
                delivery_id=delivery_id,
                run_id=row.run_id,
                event=AUDIT_EVENT,
                worker=operator[:64],
                lease_epoch=epoch,
                idempotency_key=row.idempotency_key,
                credential_id=row.credential_id,
                destination_scope=row.destination_scope,
                detail=json.dumps(detail, sort_keys=True),
            )
            .returning(AuditEvent.event_id)
        )
        event_id = inserted.scalar_one()
    return {"delivery_id": delivery_id, "state": outcome, "event_id": event_id, **detail}
