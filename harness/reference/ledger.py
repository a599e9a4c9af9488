"""Every durable step of the reference worker, one short transaction each.

Claims are fenced: taking a lease bumps ``lease_epoch``, and every later update of that
delivery names the epoch it holds. A worker that was paused past its lease and wakes up finds
its update matching no row and drops the item (``LeaseLostError``) instead of overwriting a
rival's result. PostgreSQL picks candidates with ``FOR UPDATE SKIP LOCKED``; SQLite serialises
writers with ``BEGIN IMMEDIATE``; the compare-and-set on the epoch is what makes both safe.

The statements are plain SQL, written once below, and run on one plain DBAPI connection per
thread (``harness.db.dbapi_connect``: the same pragmas and search path as every engine connection):
a worker is a short-lived forked process, and building, compiling and mapping ORM statements,
or checking connections in and out of a pool, cost it far more than the database work. The
tables are still the ones ``schema`` declares; code that works through SQLAlchemy on the same
database (the mutants' overrides) may use the ORM freely: ``_insert_delivery`` and ``_audit``
accept a ``Session``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session

from harness import db
from harness.errors import LeaseLostError
from harness.names import TERMINAL_STATES
from harness.reference.schema import AuditEvent, Delivery, Execution, QueueItem, RunRequest
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
    #: when the delivery row was written (a restored ledger keeps it, with no attempts)
    created_at: float
    #: when this lease was taken (the ledger's clock)
    claimed_at: float
    #: the credential recorded for this delivery at enqueue (the one to send it with)
    credential_id: str = ""


# -- the statements ----------------------------------------------------------------------------
# Written with ``:name`` parameters (SQLite's own style); ``_statements`` rewrites them for a
# driver that wants ``%(name)s`` (psycopg). Constant state lists are spelled out in the SQL.

_TERMINAL = ", ".join(f"'{state}'" for state in sorted(TERMINAL_STATES))

#: a queue item that may be claimed now: due, its lease lapsed, or settled (cleanup left)
_DUE = (
    "((d.delivery_status IN ('pending', 'unknown') AND d.next_attempt_at <= :now)"
    " OR (d.delivery_status = 'claimed' AND d.lease_expires_at <= :now)"
    f" OR d.delivery_status IN ({_TERMINAL}))"
)
_QUEUED = "FROM deliveries d JOIN delivery_queue q ON q.delivery_id = d.delivery_id"
_CLAIM = (
    "SELECT d.delivery_id, d.run_id, d.destination, d.body, d.recognizer, d.idempotency_key,"
    " d.delivery_status, d.attempt_count, d.first_attempt_at, d.key_window_s,"
    " d.provider_message_id, d.lease_epoch, d.credential_id, d.destination_scope, d.created_at"
    f" {_QUEUED} WHERE {_DUE}{{only}}"
    " ORDER BY d.next_attempt_at, d.delivery_id LIMIT 1{lock}"
)
_DELIVERY_COLUMNS = (
    "delivery_id",
    "run_id",
    "result_ref",
    "destination",
    "payload_hash",
    "body",
    "delivery_status",
    "idempotency_key",
    "key_window_s",
    "recognizer",
    "attempt_count",
    "next_attempt_at",
    "lease_epoch",
    "credential_id",
    "destination_scope",
    "created_at",
    "created_by",
)
_AUDIT_COLUMNS = (
    "at",
    "delivery_id",
    "run_id",
    "event",
    "worker",
    "lease_epoch",
    "idempotency_key",
    "credential_id",
    "destination_scope",
    "detail",
)


def _insert_sql(table: str, columns: Sequence[str]) -> str:
    names = ", ".join(columns)
    marks = ", ".join(f":{c}" for c in columns)
    return f"INSERT INTO {table} ({names}) VALUES ({marks})"


_SQL: dict[str, str] = {
    "pending_runs": (
        "SELECT run_id, topic, input_payload FROM run_requests WHERE run_id NOT IN"
        " (SELECT run_id FROM executions WHERE execution_status = 'committed') ORDER BY run_id"
    ),
    "roster": "SELECT destination FROM roster WHERE topic = :topic",
    "execution_status": (
        "SELECT execution_status FROM executions WHERE run_id = :run_id AND step_id = :step_id"
    ),
    "delete_execution": "DELETE FROM executions WHERE run_id = :run_id AND step_id = :step_id",
    "insert_execution": _insert_sql(
        "executions",
        (
            "run_id",
            "step_id",
            "input_hash",
            "execution_status",
            "result_ref",
            "result_body",
            "started_at",
            "finished_at",
        ),
    ),
    "freeze": _insert_sql("run_destinations", ("run_id", "destination")),
    "runs_missing_deliveries": (
        "SELECT DISTINCT rd.run_id FROM run_destinations rd LEFT OUTER JOIN deliveries d"
        " ON d.run_id = rd.run_id AND d.destination = rd.destination"
        " WHERE d.delivery_id IS NULL ORDER BY rd.run_id"
    ),
    "execution_of_run": "SELECT run_id, result_ref, result_body FROM executions"
    " WHERE run_id = :run_id",
    "frozen": "SELECT destination FROM run_destinations WHERE run_id = :run_id",
    "delivered_to": "SELECT destination FROM deliveries WHERE run_id = :run_id",
    "insert_delivery": _insert_sql("deliveries", _DELIVERY_COLUMNS),
    "insert_queue_item": _insert_sql("delivery_queue", ("delivery_id", "enqueued_at")),
    "insert_audit": _insert_sql("delivery_events", _AUDIT_COLUMNS),
    "due_ids": f"SELECT d.delivery_id {_QUEUED} WHERE {_DUE}"
    " ORDER BY d.next_attempt_at, d.delivery_id",
    "waiting_ids": f"SELECT d.delivery_id {_QUEUED} WHERE {_DUE}"
    f" AND d.delivery_status NOT IN ({_TERMINAL})",
    "take_lease": (
        "UPDATE deliveries SET delivery_status = 'claimed', lease_owner = :worker,"
        " lease_epoch = :epoch, lease_expires_at = :until"
        " WHERE delivery_id = :delivery_id AND lease_epoch = :held"
    ),
    "wakeup": f"SELECT d.delivery_status, d.next_attempt_at, d.lease_expires_at {_QUEUED}",
    "audit_row": (
        "SELECT delivery_id, run_id, idempotency_key, credential_id, destination_scope,"
        " lease_epoch FROM deliveries WHERE delivery_id = :delivery_id"
    ),
    "dequeue": "DELETE FROM delivery_queue WHERE delivery_id = :delivery_id",
}

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def _for_driver(kind: str, sql: str) -> str:
    """``sql`` in the parameter style of the database's driver: sqlite3 takes ``:name`` as
    written; psycopg wants ``%(name)s``."""
    return sql if kind == "sqlite" else _NAMED.sub(r"%(\1)s", sql)


def _statements(kind: str) -> dict[str, str]:
    """Every statement, for a ``sqlite`` or ``postgresql`` database.

    Row locks only mean something on PostgreSQL: there a claim skips the rows a rival has
    locked; SQLite has one writer at a time (``BEGIN IMMEDIATE``) and no row locks.
    """
    lock = " FOR UPDATE OF d SKIP LOCKED" if kind == "postgresql" else ""
    sql = {
        **_SQL,
        "claim_next": _CLAIM.format(only="", lock=lock),
        "claim_only": _CLAIM.format(only=" AND d.delivery_id = :only", lock=lock),
    }
    return {name: _for_driver(kind, text) for name, text in sql.items()}


_BY_KIND = {kind: _statements(kind) for kind in ("sqlite", "postgresql")}


class _ClaimRow(NamedTuple):
    delivery_id: str
    run_id: str
    destination: str
    body: str
    recognizer: str
    idempotency_key: str
    delivery_status: str
    attempt_count: int
    first_attempt_at: float | None
    key_window_s: float
    provider_message_id: str | None
    lease_epoch: int
    credential_id: str
    destination_scope: str
    created_at: float


class _AuditRow(NamedTuple):
    """The columns of a delivery that an audit event repeats, and its lease epoch."""

    delivery_id: str
    run_id: str
    idempotency_key: str
    credential_id: str
    destination_scope: str
    lease_epoch: int = 0


Params = Mapping[str, Any]


def _close_all(connections: list[tuple[int, Any]]) -> None:
    """Close the connections this process opened; leave any inherited across a fork alone."""
    me = os.getpid()
    for pid, conn in connections:
        if pid == me:
            with contextlib.suppress(Exception):
                conn.close()
    connections.clear()


class Ledger:
    """The reference system's view of its database (``config.db``).

    ``engine`` (on the same database, or None) is kept for code that works through
    SQLAlchemy next to the ledger; the ledger's own statements need no engine. ``close()``
    closes its connections (or they close when the ledger is collected).
    """

    def __init__(
        self,
        engine: Engine | None,
        config: WorkerConfig,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.engine = engine
        self.config = config
        self.now = clock or config.clock().now
        self.worker = config.worker_name
        self._kind = config.db.kind
        self._sql = _BY_KIND[self._kind]
        self._begin = db.SQLITE_BEGIN if self._kind == "sqlite" else None
        self._fenced_sql: dict[tuple[str, ...], str] = {}
        self._local = threading.local()
        #: (pid, connection) of every connection opened, for ``close``
        self._connections: list[tuple[int, Any]] = []
        self._connections_lock = threading.Lock()
        weakref.finalize(self, _close_all, self._connections)

    def close(self) -> None:
        """Close every connection the ledger opened (it opens new ones if used again)."""
        with self._connections_lock:
            _close_all(self._connections)
            self._local = threading.local()

    def _connection(self) -> Any:
        """This thread's connection, opened on first use (and again after a fork)."""
        local = self._local
        pid = os.getpid()
        if getattr(local, "pid", None) != pid:
            conn = db.dbapi_connect(self.config.db)
            with self._connections_lock:
                self._connections.append((pid, conn))
            local.conn, local.pid = conn, pid
        return local.conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        """One transaction (SQLite: ``BEGIN IMMEDIATE``); yields a cursor, commits at the end,
        rolls back if anything is raised."""
        conn = self._connection()
        cur = conn.cursor()
        try:
            if self._begin is not None:
                cur.execute(self._begin)
            yield cur
            conn.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                conn.rollback()
            raise
        finally:
            cur.close()

    def _run(self, cur: Any, name: str, params: Params | None = None) -> Any:
        """Run one statement by name on ``cur``; returns the cursor."""
        cur.execute(self._sql[name], params if params is not None else {})
        return cur

    def _column(self, cur: Any, name: str, params: Params | None = None) -> list[Any]:
        """The first column of every row a statement returns."""
        return [row[0] for row in self._run(cur, name, params).fetchall()]

    # -- execution ledger -------------------------------------------------------------------

    def pending_runs(self) -> list[RunRequest]:
        with self._tx() as cur:
            rows = self._run(cur, "pending_runs").fetchall()
        return [
            RunRequest(run_id=run_id, topic=topic, input_payload=payload)
            for run_id, topic, payload in rows
        ]

    def resolve_destinations(self, topic: str) -> list[str]:
        with self._tx() as cur:
            return sorted(self._column(cur, "roster", {"topic": topic}))

    def commit_result(
        self, run: RunRequest, *, step_id: str, result_body: str, destinations: list[str]
    ) -> bool:
        """Commit the result and freeze its destinations together; False if already done."""
        now = self.now()
        key = {"run_id": run.run_id, "step_id": step_id}
        with self._tx() as cur:
            existing = self._run(cur, "execution_status", key).fetchone()
            if existing is not None and existing[0] == "committed":
                return False
            if existing is not None:
                self._run(cur, "delete_execution", key)
            self._run(
                cur,
                "insert_execution",
                {
                    **key,
                    "input_hash": sha256_hex(run.input_payload),
                    "execution_status": "committed",
                    "result_ref": f"result:{run.run_id}:{step_id}",
                    "result_body": result_body,
                    "started_at": now,
                    "finished_at": now,
                },
            )
            if destinations:
                cur.executemany(
                    self._sql["freeze"],
                    [{"run_id": run.run_id, "destination": d} for d in destinations],
                )
        return True

    def runs_missing_deliveries(self) -> list[str]:
        """Committed runs with a frozen destination that has no delivery row yet."""
        with self._tx() as cur:
            return self._column(cur, "runs_missing_deliveries")

    # -- enqueue ----------------------------------------------------------------------------

    def enqueue_deliveries(self, run_id: str) -> int:
        """Write one delivery row and queue item per frozen destination that lacks one."""
        now = self.now()
        created = 0
        with self._tx() as cur:
            executions = self._run(cur, "execution_of_run", {"run_id": run_id}).fetchall()
            if len(executions) != 1:
                raise LookupError(f"run {run_id}: {len(executions)} executions, expected one")
            (_, result_ref, result_body) = executions[0]
            frozen = self._column(cur, "frozen", {"run_id": run_id})
            have = set(self._column(cur, "delivered_to", {"run_id": run_id}))
            for dest in sorted(set(frozen) - have):
                values = self._delivery_values(run_id, result_ref, result_body, dest, now=now)
                self._run(cur, "insert_delivery", values)
                queued = {"delivery_id": values["delivery_id"], "enqueued_at": now}
                self._run(cur, "insert_queue_item", queued)
                subject = _AuditRow(**{f: values[f] for f in _AuditRow._fields if f in values})
                self._audit(cur, subject, "enqueued", epoch=0)
                created += 1
        return created

    def _delivery_values(
        self,
        run_id: str,
        result_ref: str | None,
        result_body: str | None,
        dest: str,
        *,
        now: float,
        identity: str = "",
    ) -> dict[str, Any]:
        """Every column of a new delivery row (the ones left out start NULL)."""
        delivery_id = identity or delivery_identity(run_id, dest)
        # The credential whose scope covers this destination, chosen once and written down:
        # every attempt is made with it, and every audit event names it and its scope.
        credential = self.config.credential_for(dest)
        recognizer = f"ch-{delivery_id[4:16]}"
        body = f"{result_body}\n\n[ref {recognizer}]"
        return {
            "delivery_id": delivery_id,
            "run_id": run_id,
            "result_ref": result_ref or "",
            "destination": dest,
            "payload_hash": sha256_hex(body),
            "body": body,
            "delivery_status": "pending",
            "idempotency_key": self.key_for(delivery_id),
            "key_window_s": self.config.key_window_s,
            "recognizer": recognizer,
            "attempt_count": 0,
            "next_attempt_at": now,
            "lease_epoch": 0,
            "credential_id": credential.credential_id,
            "destination_scope": credential.scope_text,
            "created_at": now,
            "created_by": self.worker,
        }

    def _insert_delivery(
        self, s: Session, execution: Execution, dest: str, *, now: float, identity: str = ""
    ) -> Delivery:
        """The ORM spelling of one enqueue, for code that holds a ``Session`` (the mutants)."""
        values = self._delivery_values(
            execution.run_id,
            execution.result_ref,
            execution.result_body,
            dest,
            now=now,
            identity=identity,
        )
        delivery = Delivery(**values)
        s.add(delivery)
        s.add(QueueItem(delivery_id=delivery.delivery_id, enqueued_at=now))
        s.flush()
        self._audit(s, delivery, "enqueued", epoch=0)
        return delivery

    def key_for(self, delivery_id: str) -> str:
        """The idempotency key: a function of the delivery identity alone."""
        return f"ik-{delivery_id}"

    # -- claim ------------------------------------------------------------------------------

    def due_ids(self) -> list[str]:
        """Queue items that could be claimed now, in claim order."""
        with self._tx() as cur:
            return self._column(cur, "due_ids", {"now": self.now()})

    def claim_next(self, *, only: str | None = None) -> Claim | None:
        """Lease the next due queue item (or ``only`` that one), or None if none is due."""
        now = self.now()
        with self._tx() as cur:
            if only is None:
                found = self._run(cur, "claim_next", {"now": now}).fetchone()
            else:
                found = self._run(cur, "claim_only", {"now": now, "only": only}).fetchone()
            if found is None:
                return None
            row = _ClaimRow(*found)
            epoch = row.lease_epoch + 1
            status_before = row.delivery_status
            if status_before not in TERMINAL_STATES:
                self._run(
                    cur,
                    "take_lease",
                    {
                        "worker": self.worker,
                        "epoch": epoch,
                        "until": now + self.config.lease_s,
                        "delivery_id": row.delivery_id,
                        "held": row.lease_epoch,
                    },
                )
                if cur.rowcount != 1:
                    return None
                self._audit(cur, row, "claimed", epoch=epoch)
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
                created_at=row.created_at,
                claimed_at=now,
                credential_id=row.credential_id,
            )

    def next_wakeup(self) -> tuple[float | None, float | None] | None:
        """(earliest retry due, earliest lease lapse), or None once everything queued is settled.

        The two are kept apart because a worker may jump the clock to its own retry time but
        must never jump it past a rival's lease.
        """
        with self._tx() as cur:
            rows = self._run(cur, "wakeup").fetchall()
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
        columns = tuple(values)
        sql = self._fenced_sql.get(columns)
        if sql is None:
            sets = ", ".join(f"{c} = :{c}" for c in columns)
            sql = _for_driver(
                self._kind,
                f"UPDATE deliveries SET {sets}"
                " WHERE delivery_id = :fence_id AND lease_epoch = :fence_epoch",
            )
            self._fenced_sql[columns] = sql
        params = {**values, "fence_id": claim.delivery_id, "fence_epoch": claim.epoch}
        with self._tx() as cur:
            cur.execute(sql, params)
            if cur.rowcount != 1:
                raise LeaseLostError(f"{claim.delivery_id}: lease epoch {claim.epoch} superseded")
            row = _AuditRow(
                *self._run(cur, "audit_row", {"delivery_id": claim.delivery_id}).fetchone()
            )
            self._audit(cur, row, event, epoch=claim.epoch, detail=detail)

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
        with self._tx() as cur:
            return self._column(cur, "waiting_ids", {"now": self.now()})

    def record_overdue(self, delivery_id: str, *, waited_s: float) -> None:
        """Say in the audit trail that a delivery sat due and untouched (an operator sees it)."""
        with self._tx() as cur:
            found = self._run(cur, "audit_row", {"delivery_id": delivery_id}).fetchone()
            if found is not None:
                row = _AuditRow(*found)
                detail: dict[str, object] = {"waited_s": waited_s}
                self._audit(cur, row, "overdue", epoch=row.lease_epoch, detail=detail)

    def cleanup(self, delivery_id: str) -> None:
        """Remove the queue item only; the ledger row and audit trail stay."""
        with self._tx() as cur:
            gone = self._run(cur, "dequeue", {"delivery_id": delivery_id}).rowcount
            found = self._run(cur, "audit_row", {"delivery_id": delivery_id}).fetchone()
            if found is not None and gone:
                row = _AuditRow(*found)
                self._audit(cur, row, "cleaned", epoch=row.lease_epoch)

    # -- audit ------------------------------------------------------------------------------

    def _audit(
        self,
        s: Session | Any,
        row: Any,
        event: str,
        *,
        epoch: int,
        detail: dict[str, object] | None = None,
    ) -> None:
        """Append one audit event about ``row`` (a delivery: anything with its delivery_id,
        run_id, idempotency_key, credential_id and destination_scope) through ``s``: a
        ``Session``, or a cursor inside one of the ledger's transactions."""
        values = {
            "at": self.now(),
            "delivery_id": row.delivery_id,
            "run_id": row.run_id,
            "event": event,
            "worker": self.worker,
            "lease_epoch": epoch,
            "idempotency_key": row.idempotency_key,
            "credential_id": row.credential_id,
            "destination_scope": row.destination_scope,
            "detail": json.dumps(detail) if detail else None,
        }
        if isinstance(s, Session):
            s.execute(insert(AuditEvent).values(**values))
        else:
            self._run(s, "insert_audit", values)
