"""Bring your own worker: plug a worker into the harness without writing a ledger adapter first.

The harness writes the work into the case database before a worker starts (``run_requests``
and ``roster``, the intake tables of ``harness.intake``). A worker built with this module asks
for that work with ``jobs(config)`` and gets one ``Job`` per intended send, each with a
stable delivery id, a stable idempotency key, the request body and ready-made ``requests``
headers; it keeps whatever bookkeeping of its own it likes (its own tables, in the same
database: ``config.db.engine()``).

``simple_system(main, name=..., boundaries=...)`` wraps such a worker into a ``System``:

- ``prepare`` creates only the intake tables (never the reference ledger, so your own tables
  may use any names); pass ``prepare=`` to create yours before the worker starts.
- ``read_ledger`` maps your bookkeeping onto what the checkers read, through a small
  ``LedgerAdapter`` subclass (a few SQL queries). Without one, the harness cannot see what the
  worker believes: only the invariants that the providers' own logs decide are judged
  (duplicate effects, loss, key stability, key windows, replays after a restore); the others answer
  *unknown* with ``NOT_JUDGED`` in their summary (``not_judged(check)``), never a made-up
  *pass*.

Everything here runs in the worker process too, so it imports only what a worker needs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

import requests
from sqlalchemy import Connection, Engine, select, text

from harness.engine._boundary import boundary, note
from harness.intake import RosterEntry, RunRequest, create_intake_tables
from harness.invariants import CheckResult, Status
from harness.snapshot import AuditRow, DeliveryRow, LedgerSnapshot, PartialLedger, unread_ledger
from harness.systems import System, command_system
from harness.worker_config import WorkerConfig

__all__ = [
    "NOT_JUDGED",
    "Job",
    "LedgerAdapter",
    "boundary",
    "command_user_system",
    "delivery_id_for",
    "idempotency_key_for",
    "jobs",
    "not_judged",
    "note",
    "recognizer_for",
    "simple_system",
]

#: starts the message of a checker's *unknown* caused by a ledger part the system cannot give
NOT_JUDGED = "[not judged]"


# -- identities ------------------------------------------------------------------------------


def _digest(kind: str, run_id: str, destination: str) -> str:
    return hashlib.sha256(f"{kind}\x1f{run_id}\x1f{destination}".encode()).hexdigest()


def delivery_id_for(run_id: str, destination: str) -> str:
    """The delivery's identity: the same for a (run, destination) in every process, forever."""
    return f"dlv_{_digest('delivery', run_id, destination)[:24]}"


def idempotency_key_for(run_id: str, destination: str) -> str:
    """A key derived from the delivery's identity, never from an attempt."""
    return f"key_{_digest('key', run_id, destination)[:32]}"


def recognizer_for(run_id: str, destination: str) -> str:
    """The content-visible canary (``ch-`` and 12 hex) that providers log with each effect."""
    return f"ch-{_digest('recognizer', run_id, destination)[:12]}"


# -- the work --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One intended send: a run's result to one destination."""

    run_id: str
    topic: str
    destination: str
    #: stable per (run, destination); send it as ``delivery_id`` so the provider logs it
    delivery_id: str
    #: stable per (run, destination); already in ``headers`` as ``Idempotency-Key``
    idempotency_key: str
    recognizer: str
    #: the text to send (the run's input rendered, with ``[ref <recognizer>]``)
    body: str
    #: the run's input as the harness wrote it
    input: Mapping[str, Any]
    #: ``POST`` here
    url: str
    #: ``Authorization`` (the credential) and ``Idempotency-Key``; never printed
    headers: Mapping[str, str] = field(repr=False)

    @property
    def message(self) -> dict[str, str]:
        """The JSON body the fake providers take: ``requests.post(job.url, json=job.message)``."""
        return {
            "destination": self.destination,
            "run_id": self.run_id,
            "delivery_id": self.delivery_id,
            "body": self.body,
            "recognizer": self.recognizer,
        }

    def post(
        self, *, timeout_s: float = 5.0, session: requests.Session | None = None
    ) -> requests.Response:
        """Send once with ``requests`` (no retry, no classification: that is your worker's job)."""
        sender = session if session is not None else requests
        return sender.post(
            self.url, json=self.message, headers=dict(self.headers), timeout=timeout_s
        )


def _render(payload: Mapping[str, Any], recognizer: str) -> str:
    parts = [str(payload[k]) for k in ("subject", "text") if k in payload]
    if "author" in payload:
        parts.append(f"- {payload['author']}")
    if not parts:
        parts.append(json.dumps(dict(payload), sort_keys=True))
    return "\n\n".join(parts) + f"\n\n[ref {recognizer}]"


def jobs(config: WorkerConfig) -> Iterator[Job]:
    """Every intended send of this case, in a stable order (run, then destination).

    Reads the harness's ``run_requests`` and ``roster`` tables once, when iteration starts, and
    closes its connection before the first job is handed out. The roster is read *now*: a
    worker that calls this after a restart sees a roster that may have changed since
    (``roster_change``); freeze the list in your own tables if that matters to you. Iterate it
    outside your own write transactions: on SQLite the harness's engines take the write lock
    at ``BEGIN``, so a read inside one of yours waits for you (``list(jobs(config))`` first).
    """
    engine = config.db.engine()
    try:
        with engine.connect() as conn:
            runs = conn.execute(
                select(RunRequest.run_id, RunRequest.topic, RunRequest.input_payload).order_by(
                    RunRequest.run_id
                )
            ).all()
            roster: dict[str, list[str]] = {}
            for topic, destination in conn.execute(
                select(RosterEntry.topic, RosterEntry.destination).order_by(
                    RosterEntry.topic, RosterEntry.destination
                )
            ):
                roster.setdefault(topic, []).append(destination)
    finally:
        engine.dispose()
    url = config.provider_url.rstrip("/") + "/v1/messages"
    for run_id, topic, raw in runs:
        payload = json.loads(raw)
        for destination in roster.get(topic, []):
            key = idempotency_key_for(run_id, destination)
            recognizer = recognizer_for(run_id, destination)
            yield Job(
                run_id=run_id,
                topic=topic,
                destination=destination,
                delivery_id=delivery_id_for(run_id, destination),
                idempotency_key=key,
                recognizer=recognizer,
                body=_render(payload, recognizer),
                input=payload,
                url=url,
                headers={
                    "Authorization": f"Bearer {config.credential_secret}",
                    "Idempotency-Key": key,
                },
            )


# -- reading the user's ledger ---------------------------------------------------------------


class LedgerAdapter:
    """Map your own tables onto what the checkers read: a few SQL queries.

    Subclass it and set ``deliveries_sql`` (required): one row per delivery your worker keeps,
    with the columns ``run_id``, ``destination``, ``status``, ``key`` (the idempotency key) and
    ``created_by`` (the worker name, ``config.worker_name``). Optional columns:
    ``delivery_id`` (default: ``delivery_id_for(run_id, destination)``, what ``Job`` uses),
    ``provider_message_id``, ``attempt_count``, ``created_at``, ``next_attempt_at``,
    ``first_attempt_at``, ``acknowledged_at``, ``last_error``, ``key_window_s``,
    ``lease_expires_at``, ``credential_id``, ``destination_scope``
    (``idempotency_key`` and ``delivery_status`` are accepted as the long names).

    ``states`` maps your status values to the harness's (``pending``, ``claimed``,
    ``delivered``, ``failed``, ``unknown``, ``review``); values not in it are kept as they are.

    Optional queries, each answering *unknown* for the invariants that need it when left out:

    - ``committed_runs_sql``: ``SELECT run_id`` of runs whose result is committed (default:
      the runs that have a delivery row);
    - ``frozen_destinations_sql``: ``SELECT run_id, destination`` as frozen at commit
      (default: the delivery rows);
    - ``queue_sql``: ``SELECT delivery_id`` of items still queued (default: none, a system
      with no queue apart from its ledger);
    - ``audit_sql``: ``SELECT event_id, delivery_id, run_id, event, worker`` and optionally
      ``at``, ``idempotency_key``, ``credential_id``, ``destination_scope``, ``detail``;
      events named as the reference names them (``enqueued``, ``attempt``, ``delivered``,
      ``reconciled``). Without it ``audit_survives_cleanup``, ``states_distinguishable`` and
      ``credential_scope`` are not judged;
    - ``state_counts_sql``: ``SELECT status, COUNT(*) ... GROUP BY status``, the query your
      operators run (``states_distinguishable`` checks that it agrees with the rows).

    Override a method (``deliveries``, ``committed_runs``, ...) instead when one query is not
    enough; each takes an open ``Connection`` and returns rows as mappings.
    """

    deliveries_sql: ClassVar[str] = ""
    committed_runs_sql: ClassVar[str | None] = None
    frozen_destinations_sql: ClassVar[str | None] = None
    queue_sql: ClassVar[str | None] = None
    audit_sql: ClassVar[str | None] = None
    state_counts_sql: ClassVar[str | None] = None
    states: ClassVar[Mapping[str, str]] = {}

    def _rows(self, conn: Connection, sql: str) -> list[Mapping[str, Any]]:
        return [dict(r) for r in conn.execute(text(sql)).mappings()]

    def deliveries(self, conn: Connection) -> list[Mapping[str, Any]]:
        if not self.deliveries_sql:
            raise TypeError(f"{type(self).__name__}: set deliveries_sql (or override deliveries)")
        return self._rows(conn, self.deliveries_sql)

    def committed_runs(self, conn: Connection) -> list[str] | None:
        if self.committed_runs_sql is None:
            return None
        return [str(next(iter(r.values()))) for r in self._rows(conn, self.committed_runs_sql)]

    def frozen_destinations(self, conn: Connection) -> list[Mapping[str, Any]] | None:
        if self.frozen_destinations_sql is None:
            return None
        return self._rows(conn, self.frozen_destinations_sql)

    def queue(self, conn: Connection) -> list[str] | None:
        if self.queue_sql is None:
            return None
        return [str(next(iter(r.values()))) for r in self._rows(conn, self.queue_sql)]

    def audit(self, conn: Connection) -> list[Mapping[str, Any]] | None:
        if self.audit_sql is None:
            return None
        return self._rows(conn, self.audit_sql)

    def state_counts(self, conn: Connection) -> dict[str, int] | None:
        if self.state_counts_sql is None:
            return None
        counts: dict[str, int] = {}
        for row in conn.execute(text(self.state_counts_sql)):
            state = self.states.get(str(row[0]), str(row[0]))
            counts[state] = counts.get(state, 0) + int(row[1])
        return counts

    def has_audit(self) -> bool:
        """Whether ``audit`` answers (an override of ``audit`` counts)."""
        return self.audit_sql is not None or type(self).audit is not LedgerAdapter.audit


def _time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def _pick(row: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    return default


def _delivery_row(row: Mapping[str, Any], states: Mapping[str, str]) -> DeliveryRow:
    try:
        run_id = str(row["run_id"])
        destination = str(row["destination"])
        status = str(_pick(row, "status", "delivery_status"))
    except KeyError as exc:
        raise KeyError(f"deliveries_sql must select {exc.args[0]!r}") from None
    if status == "None":
        raise KeyError("deliveries_sql must select 'status'")
    attempts = _pick(row, "attempt_count", default=0)
    window = _pick(row, "key_window_s")
    pmid = _pick(row, "provider_message_id")
    return DeliveryRow(
        delivery_id=str(_pick(row, "delivery_id", default=delivery_id_for(run_id, destination))),
        run_id=run_id,
        destination=destination,
        delivery_status=states.get(status, status),
        idempotency_key=str(_pick(row, "key", "idempotency_key", default="")),
        provider_message_id=None if pmid is None else str(pmid),
        attempt_count=int(attempts),
        created_by=str(_pick(row, "created_by", default="")),
        created_at=_time(_pick(row, "created_at")) or 0.0,
        credential_id=_pick(row, "credential_id"),
        destination_scope=_pick(row, "destination_scope"),
        first_attempt_at=_time(_pick(row, "first_attempt_at")),
        next_attempt_at=_time(_pick(row, "next_attempt_at")),
        acknowledged_at=_time(_pick(row, "acknowledged_at")),
        key_window_s=None if window is None else float(window),
        last_error=_pick(row, "last_error"),
        lease_expires_at=_time(_pick(row, "lease_expires_at")),
    )


def _audit_row(row: Mapping[str, Any]) -> AuditRow:
    return AuditRow(
        event_id=int(row["event_id"]),
        delivery_id=str(row["delivery_id"]),
        run_id=str(row["run_id"]),
        event=str(row["event"]),
        worker=str(row.get("worker") or ""),
        at=_time(row.get("at")) or 0.0,
        idempotency_key=row.get("idempotency_key"),
        credential_id=row.get("credential_id"),
        destination_scope=row.get("destination_scope"),
        detail=row.get("detail"),
    )


class _LedgerReader:
    """``System.read_ledger`` for a user system: the adapter's queries, or nothing at all."""

    def __init__(self, adapter: LedgerAdapter | None, system_name: str) -> None:
        self.adapter = adapter
        self.system_name = system_name

    def __call__(self, engine: Engine) -> LedgerSnapshot:
        if self.adapter is None:
            return unread_ledger(self.system_name)
        return self._read(self.adapter, engine)

    def _read(self, adapter: LedgerAdapter, engine: Engine) -> LedgerSnapshot:
        with engine.connect() as conn:
            deliveries = tuple(_delivery_row(r, adapter.states) for r in adapter.deliveries(conn))
            committed = adapter.committed_runs(conn)
            frozen_rows = adapter.frozen_destinations(conn)
            queue = adapter.queue(conn)
            audit_rows = adapter.audit(conn)
            state_counts = adapter.state_counts(conn)
        frozen: dict[str, list[str]] = {}
        if frozen_rows is None:
            for d in deliveries:
                frozen.setdefault(d.run_id, []).append(d.destination)
        else:
            for r in frozen_rows:
                frozen.setdefault(str(r["run_id"]), []).append(str(r["destination"]))
        missing = (
            {}
            if audit_rows is not None
            else {"audit": f"{type(adapter).__name__} gives no audit_sql"}
        )
        return PartialLedger(
            committed_runs=frozenset(
                committed if committed is not None else (d.run_id for d in deliveries)
            ),
            frozen_destinations={k: tuple(sorted(set(v))) for k, v in frozen.items()},
            deliveries=deliveries,
            queue=frozenset(queue or ()),
            audit=tuple(_audit_row(r) for r in audit_rows or ()),
            state_counts=state_counts,
            missing=missing,
        )


def not_judged(check: CheckResult) -> bool:
    """Whether a checker answered *unknown* only because the system's ledger adapter cannot
    give what it reads (no adapter, or no audit query): not a finding, a blind spot."""
    return check.status is Status.UNKNOWN and NOT_JUDGED in check.summary


def simple_system(
    main: Callable[[WorkerConfig], None],
    *,
    name: str,
    boundaries: Sequence[str],
    ledger: LedgerAdapter | type[LedgerAdapter] | None = None,
    description: str = "",
    prepare: Callable[[Engine], None] | None = None,
    config_overrides: Mapping[str, Any] | None = None,
) -> System:
    """A ``System`` for a worker that takes its work from ``jobs(config)``.

    ``name`` should be the ``module:attr`` the system is importable as: replay commands use
    it. ``boundaries`` are the names your worker passes to ``boundary()``; a sweep crashes at
    every hit of each, and a campaign that never reaches one fails. ``ledger`` is a
    ``LedgerAdapter`` (class or instance) reading your own tables; without it only the
    invariants the providers' logs decide are judged. ``prepare(engine)`` creates your tables
    on each case's fresh database, after the harness's intake tables.
    """
    chosen = tuple(boundaries)
    if not chosen:
        raise ValueError(f"system {name!r}: name at least one boundary your worker reaches")
    for b in chosen:
        if not b or not b.replace("_", "").isalnum():
            raise ValueError(f"system {name!r}: boundary {b!r} is not a plain name")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"system {name!r}: a boundary is listed twice in {list(chosen)}")
    adapter = ledger() if isinstance(ledger, type) else ledger
    user_prepare = prepare

    def prepare_case(engine: Engine) -> None:
        create_intake_tables(engine)
        if user_prepare is not None:
            user_prepare(engine)

    return System(
        name=name,
        description=description or f"your worker ({name})",
        main=main,
        prepare=prepare_case,
        read_ledger=_LedgerReader(adapter, name),
        boundaries=chosen,
        config_overrides=dict(config_overrides or {}),
    )


def command_user_system(
    command: str,
    *,
    boundaries: Sequence[str],
    prepare: Callable[[Engine], None] | None = None,
    ledger: LedgerAdapter | type[LedgerAdapter] | None = None,
) -> System:
    """A ``System`` for a worker that is a program taking its work from ``jobs(config)``.

    The harness forks and exec's ``command`` (``python`` as its first word means the harness's
    own interpreter) with the case's settings in its environment; the program calls
    ``WorkerConfig.from_env()``. Like ``simple_system``: only the intake tables (and yours,
    through ``prepare``) are created, and without a ``ledger`` adapter only the invariants the
    providers' logs decide are judged. Scenario files reach this with ``system = "cmd:..."``
    plus ``boundaries = [...]`` (and ``prepare = "module:function"``).
    """
    shape = simple_system(
        _never_called, name=f"cmd:{command}", boundaries=boundaries, ledger=ledger, prepare=prepare
    )
    return command_system(
        command,
        prepare=shape.prepare,
        read_ledger=shape.read_ledger,
        boundaries=shape.boundaries,
    )


def _never_called(config: WorkerConfig) -> None:  # pragma: no cover - replaced by the command
    raise AssertionError("a command system's worker is the program, not this function")
