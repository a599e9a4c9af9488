"""What a system's ``read_ledger`` returns: the plain rows the invariant checkers read.

A ``System``'s ``read_ledger(engine)`` (or a ``LedgerAdapter`` through ``simple_system``)
turns the system's own tables into a ``LedgerSnapshot`` of ``DeliveryRow``, ``AuditRow`` and
``StatusChange`` rows. The types are defined with the checkers (``harness.invariants``) and
named here, the one place a system imports them from, as the reference system does.

``PartialLedger`` is a snapshot some of whose parts the system cannot give: a checker that
reads a missing part answers *unknown* (``NOT_JUDGED``), never a *pass* built on an empty
table. Its rows may lack columns too (``not_given``: an agent's transcript names no worker and
no provider receipt), read the same way: a checker that reads such a column is not judged,
where a made-up ``""`` would have let it pass. ``unread_ledger`` is the snapshot of a system
with no ledger adapter at all, and ``refused_ledger`` the snapshot of one whose adapter gave
a value it does not map: every checker that reads it answers *unknown*, and the case's note
says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from fake_providers import body_hash
from harness.invariants import JUDGING
from harness.invariants._model import (
    NOT_JUDGED,
    AuditRow,
    DeliveryRow,
    LedgerSnapshot,
    MissingEvidenceError,
    StatusChange,
    column_not_given,
)

__all__ = [
    "NOT_JUDGED",
    "AuditRow",
    "DeliveryRow",
    "LedgerSnapshot",
    "PartialLedger",
    "StatusChange",
    "body_hash",
    "column_not_given",
    "refused_ledger",
    "unread_ledger",
]

#: the parts of a snapshot a system may be unable to give
SNAPSHOT_FIELDS = frozenset(
    {"committed_runs", "frozen_destinations", "deliveries", "queue", "audit", "state_counts"}
)


@dataclass(frozen=True, repr=False, eq=False)
class PartialLedger(LedgerSnapshot):
    """A snapshot some of whose parts the system cannot give.

    A checker (code in ``harness.invariants``) that reads a missing part gets
    ``MissingEvidenceError``, so it answers *unknown*, never a *pass* built on an empty
    table. Everything else (timelines, reports) reads the part as empty.
    """

    #: snapshot field -> why it cannot be read
    missing: Mapping[str, str] = field(default_factory=dict)
    #: delivery row column (``DeliveryRow`` field) -> why the system cannot give it
    not_given: Mapping[str, str] = field(default_factory=dict)

    def __getattribute__(self, name: str) -> Any:
        if name in SNAPSHOT_FIELDS and JUDGING.get():
            refused = object.__getattribute__(self, "refused")
            if refused is not None:  # not a blind spot: the case is unknown, not a pass
                raise MissingEvidenceError(refused)
            missing = object.__getattribute__(self, "missing")
            if name in missing:
                part = name.replace("_", " ")
                raise MissingEvidenceError(f"{NOT_JUDGED} ledger {part}: {missing[name]}")
            not_given = object.__getattribute__(self, "not_given")
            if name == "deliveries" and not_given:
                rows = object.__getattribute__(self, "deliveries")
                return tuple(_RowWithout(row, not_given) for row in rows)
        return object.__getattribute__(self, name)

    def __repr__(self) -> str:
        deliveries = object.__getattribute__(self, "deliveries")
        missing = object.__getattribute__(self, "missing")
        refused = object.__getattribute__(self, "refused")
        why = "" if refused is None else ", refused"
        return f"PartialLedger({len(deliveries)} deliveries, missing={sorted(missing)}{why})"


#: the columns of a delivery row
ROW_COLUMNS = frozenset(f.name for f in fields(DeliveryRow))


class _RowWithout:
    """A delivery row read while judging, some of whose columns the system cannot give: a
    checker reading one of those gets ``MissingEvidenceError`` (so it answers *not judged*);
    every other column reads as the row has it. Rows compare by identity: a checker that
    groups them never reads a column it was not given."""

    __slots__ = ("_not_given", "_row")

    def __init__(self, row: DeliveryRow, not_given: Mapping[str, str]) -> None:
        self._row = row
        self._not_given = not_given

    def __getattr__(self, name: str) -> Any:
        if name in self._not_given:
            column = name.replace("_", " ")
            raise MissingEvidenceError(
                f"{NOT_JUDGED} ledger column {column}: {self._not_given[name]}"
            )
        return getattr(self._row, name)


def unread_ledger(system_name: str) -> PartialLedger:
    """The snapshot of a system that has no ledger adapter: no rows, every checker that would
    need the ledger answers *not judged*."""
    why = f"system {system_name!r} has no ledger adapter (harness.usersystem)"
    return PartialLedger(
        committed_runs=frozenset(),
        frozen_destinations={},
        deliveries=(),
        queue=frozenset(),
        audit=(),
        no_rows_because=why,
        missing={name: why for name in SNAPSHOT_FIELDS - {"deliveries", "state_counts"}},
    )


def refused_ledger(why: str) -> PartialLedger:
    """The snapshot of a ledger the harness refused to read (its adapter gave a value it does
    not map, or a query of it does not run): no rows, and every checker answers *unknown*."""
    return PartialLedger(
        committed_runs=frozenset(),
        frozen_destinations={},
        deliveries=(),
        queue=frozenset(),
        audit=(),
        no_rows_because=why,
        refused=why,
    )
