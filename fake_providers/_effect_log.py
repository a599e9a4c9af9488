"""The durable effect log: every request that reached the handler, in arrival order.

It is what the harness counts, so it must outlive the provider process: SQLite with
``journal_mode=WAL`` and ``synchronous=FULL``, and every record is committed *before* the
reply is written, so a provider killed mid-request can still be audited after a restart.
Nothing is ever deleted or updated: epochs and clock advances are appended rows too, and the
idempotency memory is derived from the log itself, so a restarted server remembers keys.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fake_providers._errors import ProviderError
from fake_providers._records import ACCEPTED_OUTCOMES, Effect

SCHEMA_VERSION: Final = 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    epoch INTEGER NOT NULL,
    received_at REAL NOT NULL,
    credential_id TEXT,
    destination TEXT,
    run_id TEXT,
    delivery_id TEXT,
    idempotency_key TEXT,
    payload_hash TEXT,
    recognizer TEXT,
    outcome TEXT NOT NULL,
    provider_message_id TEXT,
    fault TEXT,
    status_code INTEGER,
    response_body TEXT
);
CREATE INDEX IF NOT EXISTS effects_by_key
    ON effects (epoch, credential_id, idempotency_key, outcome);
CREATE TABLE IF NOT EXISTS epochs (
    epoch INTEGER PRIMARY KEY,
    started_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS clock_advances (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    advance_s REAL NOT NULL,
    at REAL NOT NULL
);
"""

_EFFECT_COLUMNS: Final = (
    "seq",
    "epoch",
    "received_at",
    "credential_id",
    "destination",
    "run_id",
    "delivery_id",
    "idempotency_key",
    "payload_hash",
    "recognizer",
    "outcome",
    "provider_message_id",
    "fault",
    "status_code",
)

FILTER_COLUMNS: Final = (
    "destination",
    "run_id",
    "delivery_id",
    "idempotency_key",
    "recognizer",
    "outcome",
    "credential_id",
    "fault",
)
"""Columns ``query`` can filter on (a whitelist: the names are spliced into SQL)."""


@dataclass(frozen=True)
class Acceptance:
    """The accepted effect that owns an idempotency key, plus the exact reply it produced."""

    effect: Effect
    response_body: str


class EffectLog:
    """One SQLite connection, serialised by a lock, over an append-only log file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                self._conn.close()
                raise ProviderError(
                    f"{path}: effect log schema {version}, expected {SCHEMA_VERSION}"
                )
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._conn.execute(
                "INSERT OR IGNORE INTO epochs (epoch, started_at) VALUES (1, ?)", (time.time(),)
            )

    def close(self) -> None:
        """Close the connection; waits for any in-flight append to commit first."""
        with self._lock:
            self._conn.close()

    def append(
        self,
        *,
        epoch: int,
        received_at: float,
        outcome: str,
        credential_id: str | None = None,
        destination: str | None = None,
        run_id: str | None = None,
        delivery_id: str | None = None,
        idempotency_key: str | None = None,
        payload_hash: str | None = None,
        recognizer: str | None = None,
        provider_message_id: str | None = None,
        fault: str | None = None,
        status_code: int | None = None,
        response_body: str | None = None,
    ) -> Effect:
        """Append one record and commit it (durably) before returning it."""
        values: dict[str, Any] = {
            "epoch": epoch,
            "received_at": received_at,
            "credential_id": credential_id,
            "destination": destination,
            "run_id": run_id,
            "delivery_id": delivery_id,
            "idempotency_key": idempotency_key,
            "payload_hash": payload_hash,
            "recognizer": recognizer,
            "outcome": outcome,
            "provider_message_id": provider_message_id,
            "fault": fault,
            "status_code": status_code,
            "response_body": response_body,
        }
        names = ", ".join(values)
        marks = ", ".join(f":{n}" for n in values)
        with self._lock:
            # Autocommit mode: this INSERT is its own transaction, fsynced on return.
            cursor = self._conn.execute(f"INSERT INTO effects ({names}) VALUES ({marks})", values)
            seq = cursor.lastrowid
        assert seq is not None
        values.pop("response_body")
        return Effect(seq=seq, **values)

    def find_acceptance(
        self, *, epoch: int, credential_id: str, idempotency_key: str
    ) -> Acceptance | None:
        """The latest accepted effect for this key in this epoch and tenant, if any."""
        marks = ", ".join("?" for _ in ACCEPTED_OUTCOMES)
        sql = (
            f"SELECT {', '.join(_EFFECT_COLUMNS)}, response_body FROM effects"
            " WHERE epoch = ? AND credential_id = ? AND idempotency_key = ?"
            f" AND outcome IN ({marks}) ORDER BY seq DESC LIMIT 1"
        )
        with self._lock:
            row = self._conn.execute(
                sql, (epoch, credential_id, idempotency_key, *ACCEPTED_OUTCOMES)
            ).fetchone()
        if row is None:
            return None
        return Acceptance(effect=_effect(row[:-1]), response_body=row[-1])

    def query(
        self, *, epoch: int | None, filters: Mapping[str, Sequence[str]] | None = None
    ) -> list[Effect]:
        """Records ordered by seq; ``epoch=None`` means all epochs; filter values are OR-ed."""
        clauses: list[str] = []
        params: list[Any] = []
        if epoch is not None:
            clauses.append("epoch = ?")
            params.append(epoch)
        for column, wanted in (filters or {}).items():
            if column not in FILTER_COLUMNS:
                raise ValueError(f"cannot filter on {column!r}")
            if not wanted:
                continue
            clauses.append(f"{column} IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT {', '.join(_EFFECT_COLUMNS)} FROM effects{where} ORDER BY seq"
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [_effect(row) for row in rows]

    def current_epoch(self) -> int:
        """The newest epoch (1 for a fresh log)."""
        with self._lock:
            epoch: int = self._conn.execute("SELECT MAX(epoch) FROM epochs").fetchone()[0]
        return epoch

    def new_epoch(self, *, started_at: float) -> int:
        """Start and return a new epoch; earlier records stay, filtered out by default."""
        with self._lock:
            cursor = self._conn.execute(
                "INSERT INTO epochs (epoch, started_at)"
                " SELECT MAX(epoch) + 1, ? FROM epochs RETURNING epoch",
                (started_at,),
            )
            epoch: int = cursor.fetchone()[0]
            cursor.close()
        return epoch

    def clock_offset(self) -> float:
        """Total seconds the provider clock has been advanced, over the log's whole life."""
        with self._lock:
            total = self._conn.execute("SELECT SUM(advance_s) FROM clock_advances").fetchone()[0]
        return float(total or 0.0)

    def advance_clock(self, seconds: float, *, at: float) -> float:
        """Record a clock advance and return the new total offset."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO clock_advances (advance_s, at) VALUES (?, ?)", (seconds, at)
            )
            total = self._conn.execute("SELECT SUM(advance_s) FROM clock_advances").fetchone()[0]
        return float(total)


def _effect(row: Sequence[Any]) -> Effect:
    return Effect(**dict(zip(_EFFECT_COLUMNS, row, strict=True)))
