"""The durable effect log: every request that reached the handler, in arrival order.

It is what the harness counts, so it must outlive the provider process: SQLite with
``journal_mode=WAL``, and every record is committed *before* the reply is written, so a
provider killed mid-request can still be audited after a restart. ``synchronous=NORMAL``: a
commit is in the WAL (in the OS) when it returns, durable against the death of any process,
which is what the harness does to providers; only a power cut could lose the last records,
and an fsync per request would cost a loaded harness a millisecond or more each time.
Nothing is ever deleted or updated: epochs, clock advances and queue consumptions are
appended rows too, and the idempotency memory is derived from the log itself, so a restarted
server remembers keys. Each record may carry the message ``content`` a surface shows (a chat
thread, a mailbox, a queue): it is written in the same INSERT as the record, so a surface
never shows a message the log does not count. Each record also keeps the ``request`` exactly
as it was received (the HTTP body, the SMTP DATA bytes), for the browse page.

The log is a file that any process of the same user could open and edit, a worker under
test included. So the log remembers a digest of every record it wrote (and of every record
it found at start-up), and ``audit(epoch)`` compares them with the file: a record deleted,
rewritten or slipped in by anyone else is named, never taken for the provider's word.

``durable=False`` (benchmark only) keeps the same schema in an in-memory database: the same
work minus the disk, to measure what durability costs.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fake_providers._errors import ProviderError
from fake_providers._records import ACCEPTED_OUTCOMES, Effect

SCHEMA_VERSION: Final = 6

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
    response_body TEXT,
    content TEXT,
    request BLOB,
    reason TEXT,
    body_hash TEXT,
    retry_after INTEGER
);
CREATE INDEX IF NOT EXISTS effects_by_key
    ON effects (epoch, credential_id, idempotency_key, outcome);
CREATE INDEX IF NOT EXISTS effects_by_destination
    ON effects (epoch, destination, outcome);
CREATE TABLE IF NOT EXISTS epochs (
    epoch INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    clock_path TEXT
);
CREATE TABLE IF NOT EXISTS consumed (
    seq INTEGER PRIMARY KEY REFERENCES effects (seq),
    consumed_at REAL NOT NULL
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
    "reason",
    "body_hash",
    "retry_after",
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


def _digest(row: Sequence[Any]) -> str:
    """A record's fingerprint (its ``_EFFECT_COLUMNS``, times as floats: as read back)."""
    values = [
        float(v) if name == "received_at" and v is not None else v
        for name, v in zip(_EFFECT_COLUMNS, row, strict=True)
    ]
    return hashlib.sha256(repr(values).encode()).hexdigest()


@dataclass(frozen=True)
class Audit:
    """What ``EffectLog.audit`` found for one epoch: every record the provider wrote is
    there unchanged, and nothing else is (``problems`` names the first few that are not)."""

    epoch: int
    records: int
    problems: tuple[str, ...]

    @property
    def intact(self) -> bool:
        return not self.problems


#: how many problems an audit names (their total is always given)
_AUDIT_SHOWN = 5


@dataclass(frozen=True)
class Acceptance:
    """The accepted effect that owns an idempotency key, plus the exact reply it produced."""

    effect: Effect
    response_body: str


@dataclass(frozen=True)
class Message:
    """A record plus the content a surface (thread, mailbox, queue) shows for it."""

    effect: Effect
    content: str | None


@dataclass(frozen=True)
class Logged:
    """A record with everything kept about it: what a surface shows and what was received."""

    effect: Effect
    content: str | None
    request: bytes | None


class EffectLog:
    """One SQLite connection, serialised by a lock, over an append-only log file."""

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        self.path = path
        self.durable = durable
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            str(path) if durable else ":memory:",
            isolation_level=None,
            check_same_thread=False,
            timeout=30.0,
        )
        with self._lock:
            if durable:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, 2, 3, 4, 5, SCHEMA_VERSION):
                self._conn.close()
                raise ProviderError(
                    f"{path}: effect log schema {version}, expected {SCHEMA_VERSION}"
                )
            if version == 1:
                # Version 1 had no content column (and no consumed table, created below).
                self._conn.execute("ALTER TABLE effects ADD COLUMN content TEXT")
            self._conn.executescript(_SCHEMA)
            if version in (1, 2):
                # Versions 1 and 2 had no clock file per epoch (the clock was wall time).
                self._conn.execute("ALTER TABLE epochs ADD COLUMN clock_path TEXT")
            if version in (1, 2, 3):
                # Versions 1 to 3 did not keep the request as received (the browse page).
                self._conn.execute("ALTER TABLE effects ADD COLUMN request BLOB")
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(effects)")}
            if "reason" not in columns:
                # Versions 1 to 4 did not say why a request was refused or left unattributed.
                self._conn.execute("ALTER TABLE effects ADD COLUMN reason TEXT")
            if "body_hash" not in columns:
                # Versions 1 to 5 kept no hash of the body in its normal form, nor the
                # Retry-After a throttling answer gave.
                self._conn.execute("ALTER TABLE effects ADD COLUMN body_hash TEXT")
                self._conn.execute("ALTER TABLE effects ADD COLUMN retry_after INTEGER")
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._conn.execute(
                "INSERT OR IGNORE INTO epochs (epoch, started_at) VALUES (1, ?)", (time.time(),)
            )
            #: seq -> (epoch, digest) of every record this log wrote or found at start-up
            self._written: dict[int, tuple[int, str]] = {
                int(row[0]): (int(row[1]), _digest(row))
                for row in self._conn.execute(f"SELECT {', '.join(_EFFECT_COLUMNS)} FROM effects")
            }

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
        content: str | None = None,
        request: bytes | None = None,
        reason: str | None = None,
        body_hash: str | None = None,
        retry_after: int | None = None,
    ) -> Effect:
        """Append one record and commit it (durably) before returning it.

        ``response_body`` is the reply saved for replays; ``content`` is what a surface shows;
        ``request`` is the request exactly as received (what the browse page shows in full).
        """
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
            "content": content,
            "request": request,
            "reason": reason,
            "body_hash": body_hash,
            "retry_after": retry_after,
        }
        names = ", ".join(values)
        marks = ", ".join(f":{n}" for n in values)
        with self._lock:
            # Autocommit mode: this INSERT is its own transaction, committed on return.
            cursor = self._conn.execute(f"INSERT INTO effects ({names}) VALUES ({marks})", values)
            seq = cursor.lastrowid
            assert seq is not None
            row = [seq, *(values[name] for name in _EFFECT_COLUMNS[1:])]
            self._written[seq] = (epoch, _digest(row))
        values.pop("response_body")
        values.pop("content")
        values.pop("request")
        return Effect(seq=seq, **values)

    def request_of(self, seq: int) -> bytes | None:
        """The request record ``seq`` kept as received (None if none was kept)."""
        with self._lock:
            row = self._conn.execute("SELECT request FROM effects WHERE seq = ?", (seq,)).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def find_acceptance(
        self,
        *,
        epoch: int,
        idempotency_key: str,
        credential_id: str | None = None,
        destination: str | None = None,
        saved_errors: bool = False,
    ) -> Acceptance | None:
        """The latest effect that owns this key in this epoch, if any.

        The key is scoped to ``credential_id`` (a tenant) and/or ``destination`` (a queue,
        an endpoint), whichever are given. Owners are accepted effects, plus, with
        ``saved_errors``, rejections whose reply was saved for replay.
        """
        marks = ", ".join("?" for _ in ACCEPTED_OUTCOMES)
        clauses = ["epoch = ?", "idempotency_key = ?"]
        params: list[Any] = [epoch, idempotency_key]
        if credential_id is not None:
            clauses.append("credential_id = ?")
            params.append(credential_id)
        if destination is not None:
            clauses.append("destination = ?")
            params.append(destination)
        owner = f"outcome IN ({marks})"
        if saved_errors:
            owner = f"({owner} OR (outcome = 'rejected' AND response_body IS NOT NULL))"
        clauses.append(owner)
        params.extend(ACCEPTED_OUTCOMES)
        sql = (
            f"SELECT {', '.join(_EFFECT_COLUMNS)}, response_body FROM effects"
            f" WHERE {' AND '.join(clauses)} ORDER BY seq DESC LIMIT 1"
        )
        with self._lock:
            row = self._conn.execute(sql, params).fetchone()
        if row is None:
            return None
        return Acceptance(effect=_effect(row[:-1]), response_body=row[-1])

    def messages(
        self,
        *,
        epoch: int,
        outcomes: Sequence[str] = ACCEPTED_OUTCOMES,
        destinations: Sequence[str] | None = None,
        credential_id: str | None = None,
        unconsumed: bool = False,
    ) -> list[Message]:
        """Records with their content, ordered by seq: what a surface renders."""
        clauses = ["e.epoch = ?", f"e.outcome IN ({', '.join('?' for _ in outcomes)})"]
        params: list[Any] = [epoch, *outcomes]
        if destinations is not None:
            if not destinations:
                return []
            clauses.append(f"e.destination IN ({', '.join('?' for _ in destinations)})")
            params.extend(destinations)
        if credential_id is not None:
            clauses.append("e.credential_id = ?")
            params.append(credential_id)
        if unconsumed:
            clauses.append("NOT EXISTS (SELECT 1 FROM consumed c WHERE c.seq = e.seq)")
        columns = ", ".join(f"e.{c}" for c in _EFFECT_COLUMNS)
        sql = (
            f"SELECT {columns}, e.content FROM effects e"
            f" WHERE {' AND '.join(clauses)} ORDER BY e.seq"
        )
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [Message(effect=_effect(row[:-1]), content=row[-1]) for row in rows]

    def everything(self, *, epoch: int | None) -> list[Logged]:
        """Every record of ``epoch`` (None: all epochs) with its content and request, by seq:
        what the browse page lists."""
        columns = ", ".join(_EFFECT_COLUMNS)
        where = "" if epoch is None else " WHERE epoch = ?"
        sql = f"SELECT {columns}, content, request FROM effects{where} ORDER BY seq"
        with self._lock:
            rows = self._conn.execute(sql, () if epoch is None else (epoch,)).fetchall()
        return [
            Logged(
                effect=_effect(row[:-2]),
                content=row[-2],
                request=None if row[-1] is None else bytes(row[-1]),
            )
            for row in rows
        ]

    def destinations(self, *, epoch: int) -> list[str]:
        """Every destination named by a record in this epoch (sorted)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT destination FROM effects"
                " WHERE epoch = ? AND destination IS NOT NULL ORDER BY destination",
                (epoch,),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def consume(self, *, epoch: int, destination: str, limit: int, at: float) -> list[Message]:
        """Mark the oldest ``limit`` unconsumed accepted messages of ``destination`` consumed
        (one committed transaction) and return them."""
        marks = ", ".join("?" for _ in ACCEPTED_OUTCOMES)
        columns = ", ".join(f"e.{c}" for c in _EFFECT_COLUMNS)
        sql = (
            f"SELECT {columns}, e.content FROM effects e"
            f" WHERE e.epoch = ? AND e.destination = ? AND e.outcome IN ({marks})"
            " AND NOT EXISTS (SELECT 1 FROM consumed c WHERE c.seq = e.seq)"
            " ORDER BY e.seq LIMIT ?"
        )
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                rows = self._conn.execute(
                    sql, (epoch, destination, *ACCEPTED_OUTCOMES, limit)
                ).fetchall()
                self._conn.executemany(
                    "INSERT INTO consumed (seq, consumed_at) VALUES (?, ?)",
                    [(row[0], at) for row in rows],
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        return [Message(effect=_effect(row[:-1]), content=row[-1]) for row in rows]

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

    def audit(self, epoch: int) -> Audit:
        """Compare epoch ``epoch`` in the file with what this log wrote there: a record
        missing (deleted, or moved to another epoch), changed, or not written by the
        provider is a problem. Reads the epoch's records once."""
        sql = f"SELECT {', '.join(_EFFECT_COLUMNS)} FROM effects WHERE epoch = ? ORDER BY seq"
        with self._lock:
            rows = self._conn.execute(sql, (epoch,)).fetchall()
            written = {seq: d for seq, (ep, d) in self._written.items() if ep == epoch}
        found = {int(row[0]): _digest(row) for row in rows}
        problems = [f"record {seq} deleted" for seq in sorted(written.keys() - found.keys())]
        problems += [
            f"record {seq} rewritten"
            for seq in sorted(written.keys() & found.keys())
            if written[seq] != found[seq]
        ]
        problems += [
            f"record {seq} not written by the provider"
            for seq in sorted(found.keys() - written.keys())
        ]
        shown = problems[:_AUDIT_SHOWN]
        if len(problems) > len(shown):
            shown.append(f"and {len(problems) - len(shown)} more")
        return Audit(epoch=epoch, records=len(rows), problems=tuple(shown))

    def size(self) -> int:
        """How many records the log holds, of every epoch."""
        with self._lock:
            count: int = self._conn.execute("SELECT COUNT(*) FROM effects").fetchone()[0]
        return count

    def current_epoch(self) -> int:
        """The newest epoch (1 for a fresh log)."""
        with self._lock:
            epoch: int = self._conn.execute("SELECT MAX(epoch) FROM epochs").fetchone()[0]
        return epoch

    def new_epoch(self, *, started_at: float, clock_path: str | None = None) -> int:
        """Start and return a new epoch; earlier records stay, filtered out by default.

        ``clock_path`` is the clock file the epoch's records are stamped from (None: the
        provider's own clock); kept so a restarted provider follows the same clock.
        """
        with self._lock:
            cursor = self._conn.execute(
                "INSERT INTO epochs (epoch, started_at, clock_path)"
                " SELECT MAX(epoch) + 1, ?, ? FROM epochs RETURNING epoch",
                (started_at, clock_path),
            )
            epoch: int = cursor.fetchone()[0]
            cursor.close()
        return epoch

    def epoch_clock_path(self, epoch: int) -> str | None:
        """The clock file epoch ``epoch`` follows, if any."""
        with self._lock:
            row = self._conn.execute(
                "SELECT clock_path FROM epochs WHERE epoch = ?", (epoch,)
            ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

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
