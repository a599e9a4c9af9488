"""Bring your own worker: plug a worker into the harness without writing a ledger adapter first.

The harness writes the work into the case database before a worker starts (``run_requests``
and ``roster``, the intake tables of ``harness.intake``). A worker built with this module asks
for that work with ``jobs(config)`` and gets one ``Job`` per intended send, each with a
stable delivery id, a stable idempotency key, the request body and ready-made ``requests``
headers; it keeps whatever bookkeeping of its own it likes (its own tables, in the same
database: ``config.db.engine()``).

``simple_system(main, name=..., boundaries=...)`` wraps such a worker into a ``System``:

- ``prepare`` creates only the intake tables (never the reference ledger, so your own tables
  may use any names); pass ``prepare=`` to create yours before the worker starts. A worker
  whose work is its own rows (an ``orders`` table) writes them there, from
  ``planned_work(engine)``, and returns the (run, destination) pairs it intends to deliver;
  or it names them with ``intent=`` (a query). The checkers then hold it to that intent, and
  no harness job has to be copied into its tables by hand.
- ``read_ledger`` maps your bookkeeping onto what the checkers read, through a small
  ``LedgerAdapter`` subclass (a few SQL queries). Without one, the harness cannot see what the
  worker believes: only the invariants that the providers' own logs decide are judged
  (duplicate effects, loss, key stability, key windows, replays after a restore); the others answer
  *unknown* with ``NOT_JUDGED`` in their summary (``not_judged(check)``), never a made-up
  *pass*. An adapter refuses a value it does not map (a status outside ``states``, a
  ``created_by`` that is no worker's name): the ledger is then not judged and the case is
  *unknown*, with a note naming the query, the column, the value and what is mapped.

Everything here runs in the worker process too, so it imports only what a worker needs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

import requests
from sqlalchemy import Connection, Engine, select, text

from harness.engine.process._boundary import boundary, note
from harness.errors import BadInputError, SystemDefinitionError
from harness.identities import delivery_id_for, idempotency_key_for, recognizer_for
from harness.intake import RosterEntry, RunRequest, create_intake_tables
from harness.invariants import CheckResult
from harness.names import DELIVERY_STATES
from harness.snapshot import (
    ROW_COLUMNS,
    SNAPSHOT_FIELDS,
    AuditRow,
    DeliveryRow,
    LedgerSnapshot,
    PartialLedger,
    body_hash,
    refused_ledger,
    unread_ledger,
)
from harness.systems import System, command_system
from harness.worker_config import WorkerConfig

__all__ = [
    "NOT_JUDGED",
    "Job",
    "LedgerAdapter",
    "Work",
    "boundary",
    "command_user_system",
    "delivery_id_for",
    "idempotency_key_for",
    "jobs",
    "not_judged",
    "note",
    "planned_work",
    "recognizer_for",
    "simple_system",
]

#: starts the message of a checker's *unknown* caused by a ledger part the system cannot give
NOT_JUDGED = "[not judged]"


# -- identities: delivery_id_for, idempotency_key_for, recognizer_for (harness.identities) --

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


@dataclass(frozen=True)
class Work:
    """One send the harness planned for this case: a run's result to one destination.

    What a ``prepare`` seeds a worker's own tables from (``planned_work(engine)``), so its
    orders carry the workload's runs, destinations and provider faults without a copy of
    ``jobs()``."""

    run_id: str
    topic: str
    destination: str
    #: the run's input as the harness wrote it (``subject``, ``text``, ``author``)
    input: Mapping[str, Any]

    @property
    def delivery_id(self) -> str:
        """``delivery_id_for(run_id, destination)``: what ``Job`` sends as the delivery id."""
        return delivery_id_for(self.run_id, self.destination)


def _intake(engine: Engine) -> list[Work]:
    """The harness's intake tables as ``Work``, in a stable order (run, then destination)."""
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
    return [
        Work(run_id=run_id, topic=topic, destination=destination, input=payload)
        for run_id, topic, raw in runs
        for payload in (json.loads(raw),)
        for destination in roster.get(topic, [])
    ]


def planned_work(engine: Engine) -> list[Work]:
    """Every send the harness planned for this case, from its intake tables: for a
    ``prepare`` that writes a worker's own rows (its ``orders``) from the workload, so the
    harness's seed, destinations and provider faults apply to them. ``engine`` is the one
    ``prepare`` is given; the caller disposes of it."""
    return _intake(engine)


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
        planned = _intake(engine)
    finally:
        engine.dispose()
    url = config.provider_url.rstrip("/") + "/v1/messages"
    for work in planned:
        run_id, destination = work.run_id, work.destination
        key = idempotency_key_for(run_id, destination)
        recognizer = recognizer_for(run_id, destination)
        yield Job(
            run_id=run_id,
            topic=work.topic,
            destination=destination,
            delivery_id=work.delivery_id,
            idempotency_key=key,
            recognizer=recognizer,
            body=_render(work.input, recognizer),
            input=work.input,
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
    ``lease_expires_at``, ``credential_id``, ``destination_scope``, ``body`` (the text the
    delivery sends, hashed in the providers' normal form for ``content_matches_ledger``)
    (``idempotency_key`` and ``delivery_status`` are accepted as the long names).

    ``states`` maps your status values to the harness's (``pending``, ``claimed``,
    ``delivered``, ``failed``, ``unknown``, ``review``); a value that is one of those six is
    taken as it is. Any other value is refused: the harness will not guess what your ledger
    means, nor blame your worker for a state it was never told about, so the ledger is not
    judged and the case is *unknown*, with a note naming the query, column, value and what is
    mapped. ``created_by`` is refused likewise unless it is a name the harness gave a worker
    (``w1``, ``w2``, ...: ``config.worker_name``), since a made-up creator would hide a
    restart that minted a second item. A ``states`` that maps onto no harness state is refused
    when ``simple_system`` is given the adapter.

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
    #: columns of ``deliveries`` your ledger cannot give (column -> why), ``created_by``,
    #: ``key`` (write ``idempotency_key``) or ``provider_message_id`` among them: an invariant
    #: that reads one is not judged, and says why, where an empty value would let it pass
    not_given: ClassVar[Mapping[str, str]] = {}
    #: parts of the snapshot your ledger cannot give (``committed_runs``,
    #: ``frozen_destinations``, ``queue``; part -> why), each read the same way
    parts_not_given: ClassVar[Mapping[str, str]] = {}

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
        raw: Counter[str] = Counter()
        for row in conn.execute(text(self.state_counts_sql)):
            raw[str(row[0])] += int(row[1])
        refuse_unmapped(self, raw, query="state_counts_sql", column="its first column")
        counts: dict[str, int] = {}
        for value, n in raw.items():
            state = self.states.get(value, value)
            counts[state] = counts.get(state, 0) + n
        return counts

    def has_audit(self) -> bool:
        """Whether ``audit`` answers (an override of ``audit`` counts)."""
        return self.audit_sql is not None or type(self).audit is not LedgerAdapter.audit


class LedgerRefusedError(Exception):
    """The user's ledger holds a value its adapter does not map (a status outside ``states``,
    a ``created_by`` that names no worker, a required column not selected).

    Evidence that the mapping is incomplete, not that the worker is wrong: the ledger is not
    judged (the case is *unknown*, its note says why), never silently taken as it is."""


#: the names the harness gives a case's workers (``config.worker_name``)
_WORKER_NAME = re.compile(r"w[0-9]+")


def check_states(adapter: LedgerAdapter) -> None:
    """Refuse a ``states`` mapping that maps a value onto no harness state, where the adapter
    is handed over (``simple_system``), before any case runs."""
    name = type(adapter).__name__
    wrong = {k: v for k, v in adapter.states.items() if v not in DELIVERY_STATES}
    if wrong:
        raise SystemDefinitionError(
            f"{name}.states maps {', '.join(f'{k!r} to {v!r}' for k, v in sorted(wrong.items()))}"
            f"; expected one of the harness's states: {', '.join(DELIVERY_STATES)}"
        )
    unknown = sorted(set(adapter.not_given) - ROW_COLUMNS)
    if unknown:
        raise SystemDefinitionError(
            f"{name}.not_given names {', '.join(map(repr, unknown))}; expected columns of a "
            f"delivery row: {', '.join(sorted(ROW_COLUMNS))}"
        )
    parts = sorted(set(adapter.parts_not_given) - SNAPSHOT_FIELDS)
    if parts:
        raise SystemDefinitionError(
            f"{name}.parts_not_given names {', '.join(map(repr, parts))}; expected parts of a "
            f"snapshot: {', '.join(sorted(SNAPSHOT_FIELDS))}"
        )
    odd = [k for k in adapter.states if not isinstance(k, str) or not k]
    if odd:
        raise SystemDefinitionError(
            f"{name}.states has key(s) {odd!r}; expected your status values, as text"
        )


def refuse_unmapped(
    adapter: LedgerAdapter, values: Mapping[str, int], *, query: str, column: str
) -> None:
    """Raise ``LedgerRefusedError`` for status ``values`` (value -> rows) that are neither a
    key of ``adapter.states`` nor a harness state."""
    known = set(adapter.states) | set(DELIVERY_STATES)
    unmapped = {v: n for v, n in values.items() if v not in known}
    if not unmapped:
        return
    name = type(adapter).__name__
    held = ", ".join(f"{v!r} ({n} row{'s' if n != 1 else ''})" for v, n in sorted(unmapped.items()))
    mapped = ", ".join(repr(k) for k in sorted(adapter.states)) or "nothing"
    raise LedgerRefusedError(
        f"{name}.{query} {column} holds {held}, which {name}.states does not map "
        f"(it maps {mapped}; the harness's own states pass as they are: "
        f"{', '.join(DELIVERY_STATES)}); map it in states"
    )


def _refuse_creators(adapter: LedgerAdapter, rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise ``LedgerRefusedError`` unless every row's ``created_by`` is a worker's name."""
    name = type(adapter).__name__
    if rows and all("created_by" not in r for r in rows):
        raise LedgerRefusedError(
            f"{name}.deliveries_sql selects no created_by column (the config.worker_name of "
            "the worker that created the row): without it a restart that mints a second "
            "item cannot be seen"
        )
    made_up = Counter(
        "NULL" if r.get("created_by") is None else repr(str(r["created_by"]))
        for r in rows
        if not _WORKER_NAME.fullmatch(str(r.get("created_by")))
    )
    if made_up:
        held = ", ".join(
            f"{v} ({n} row{'s' if n != 1 else ''})" for v, n in sorted(made_up.items())
        )
        raise LedgerRefusedError(
            f"{name}.deliveries_sql column created_by holds {held}, not a name the harness "
            "gave a worker (w1, w2, ...): store config.worker_name, or a restart that mints "
            "a second item cannot be seen"
        )


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
        raise LedgerRefusedError(f"deliveries_sql must select {exc.args[0]!r}") from None
    if status == "None":
        raise LedgerRefusedError("deliveries_sql must select 'status' (never NULL)")
    attempts = _pick(row, "attempt_count", default=0)
    window = _pick(row, "key_window_s")
    pmid = _pick(row, "provider_message_id")
    body = _pick(row, "body")
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
        body_hash=None if body is None else body_hash(str(body)),
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
        from sqlalchemy.exc import SQLAlchemyError

        try:
            return self._read(self.adapter, engine)
        except (LedgerRefusedError, SQLAlchemyError) as exc:
            if isinstance(exc, SQLAlchemyError):  # a query of the adapter does not run
                first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
                exc = LedgerRefusedError(
                    f"a query of {type(self.adapter).__name__} failed on the case's "
                    f"database: {first}"
                )
            return refused_ledger(f"ledger refused: {exc}")

    def _read(self, adapter: LedgerAdapter, engine: Engine) -> LedgerSnapshot:
        with engine.connect() as conn:
            rows = adapter.deliveries(conn)
            deliveries = tuple(_delivery_row(r, adapter.states) for r in rows)
            statuses = Counter(str(_pick(r, "status", "delivery_status")) for r in rows)
            refuse_unmapped(adapter, statuses, query="deliveries_sql", column="column status")
            if "created_by" not in adapter.not_given:
                _refuse_creators(adapter, rows)
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
        missing = dict(adapter.parts_not_given)
        if audit_rows is None:
            missing.setdefault("audit", f"{type(adapter).__name__} gives no audit_sql")
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
            not_given=dict(adapter.not_given),
        )


def not_judged(check: CheckResult) -> bool:
    """Whether a checker answered *unknown* only because the system's ledger adapter cannot
    give what it reads (no adapter, or no audit query): not a finding, a blind spot."""
    from harness.invariants import looks

    return looks.look(check) == "not_judged"


#: what ``simple_system(intent=...)`` takes: a query selecting ``run_id, destination``, or a
#: function over an open connection returning (run_id, destination) pairs
IntentQuery = str | Callable[[Connection], Iterable[Any]]

#: what ``simple_system(prepare=...)`` takes: it may return the intended pairs
Prepare = Callable[[Engine], Iterable[Any] | None]


def simple_system(
    main: Callable[[WorkerConfig], None],
    *,
    name: str,
    boundaries: Sequence[str],
    ledger: LedgerAdapter | type[LedgerAdapter] | None = None,
    description: str = "",
    prepare: Prepare | None = None,
    intent: IntentQuery | None = None,
    config_overrides: Mapping[str, Any] | None = None,
) -> System:
    """A ``System`` for a worker that takes its work from ``jobs(config)``, or from its own
    tables.

    ``name`` should be the ``module:attr`` the system is importable as: replay commands use
    it. ``boundaries`` are the names your worker passes to ``boundary()``; a sweep crashes at
    every hit of each, and a campaign that never reaches one fails. ``ledger`` is a
    ``LedgerAdapter`` (class or instance) reading your own tables; without it only the
    invariants the providers' logs decide are judged.

    ``prepare(engine)`` runs on each case's fresh database once the harness has written its
    work there (the intake tables, seeded): it creates your tables and may fill them from
    ``planned_work(engine)``. If it returns (run_id, destination) pairs, those are what the
    case intends to deliver, and the checkers hold your worker to them; ``intent`` names them
    instead, as a query over your tables (``SELECT order_id AS run_id, email AS
    destination FROM orders``) or a function of an open connection. Neither: the workload's
    intent, every run to its topic's roster.
    """
    chosen = tuple(boundaries)
    if not chosen:
        raise SystemDefinitionError(
            f"system {name!r}: name at least one boundary your worker reaches"
        )
    for b in chosen:
        if not b or not b.replace("_", "").isalnum():
            raise SystemDefinitionError(f"system {name!r}: boundary {b!r} is not a plain name")
    if len(set(chosen)) != len(chosen):
        raise SystemDefinitionError(
            f"system {name!r}: a boundary is listed twice in {list(chosen)}"
        )
    prepare_case, reader, declared = _user_parts(name, ledger, prepare, intent)
    return System(
        name=name,
        description=description or f"your worker ({name})",
        main=main,
        prepare=prepare_case,
        read_ledger=reader,
        boundaries=chosen,
        config_overrides=dict(config_overrides or {}),
        intent=declared,
    )


def _user_parts(
    name: str,
    ledger: LedgerAdapter | type[LedgerAdapter] | None,
    prepare: Prepare | None,
    intent: IntentQuery | None,
) -> tuple[Callable[[Engine], None], _LedgerReader, _DeclaredIntent | None]:
    """What a user system is made of besides its worker and boundaries, checked: the
    case's ``prepare`` (the intake tables), the ledger reader, the declared intent."""
    adapter = ledger() if isinstance(ledger, type) else ledger
    if adapter is not None and not isinstance(adapter, LedgerAdapter):
        raise SystemDefinitionError(
            f"system {name!r}: ledger= is a {type(adapter).__name__}; expected a "
            "harness.LedgerAdapter subclass"
        )
    if adapter is not None:
        check_states(adapter)
    usable = callable(intent) or (isinstance(intent, str) and bool(intent.strip()))
    if intent is not None and not usable:
        raise SystemDefinitionError(
            f"system {name!r}: intent= is {intent!r}; expected a query selecting run_id and "
            "destination, or a function of a connection returning (run_id, destination) pairs"
        )

    def prepare_case(engine: Engine) -> None:
        create_intake_tables(engine)

    declared = (
        None
        if prepare is None and intent is None
        else _DeclaredIntent(name, prepare=prepare, query=intent)
    )
    return prepare_case, _LedgerReader(adapter, name), declared


class _DeclaredIntent:
    """``System.intent`` of a ``simple_system``: the user's ``prepare`` (on the seeded
    database, so it can copy the planned work into its own tables), then what it returned or
    what the ``intent`` query finds. Bad input (both, neither pairs nor None, a failing
    query) is one line naming the system and the function."""

    def __init__(self, system: str, *, prepare: Prepare | None, query: IntentQuery | None) -> None:
        self.system = system
        self.prepare = prepare
        self.query = query

    def _where(self, what: object) -> str:
        label = what if isinstance(what, str) else getattr(what, "__qualname__", repr(what))
        return f"system {self.system!r}: {label}"

    def __call__(self, engine: Engine) -> list[tuple[str, str]] | None:
        from harness.engine.plan.workload import intent_pairs

        returned = self.prepare(engine) if self.prepare is not None else None
        if self.query is None:
            if returned is None:
                return None
            label = getattr(self.prepare, "__qualname__", "prepare")
            return _flat(intent_pairs(returned, where=self._where(f"what {label}() returned")))
        if returned is not None:
            raise BadInputError(
                f"system {self.system!r}: prepare returned the intended deliveries and "
                "intent= names them too; declare them once"
            )
        return _flat(intent_pairs(self._ask(engine), where=self._where("intent=")))

    def _ask(self, engine: Engine) -> list[Any]:
        from sqlalchemy.exc import SQLAlchemyError

        query = self.query
        try:
            with engine.connect() as conn:
                if callable(query):
                    return list(query(conn))
                assert query is not None
                rows = [dict(r) for r in conn.execute(text(query)).mappings()]
        except SQLAlchemyError as exc:
            first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise BadInputError(f"{self._where('intent=')} query failed: {first}") from None
        if rows and not {"run_id", "destination"} <= set(rows[0]):
            raise BadInputError(
                f"{self._where('intent=')} query selects {sorted(rows[0])}; expected the "
                "columns run_id and destination (SELECT order_id AS run_id, ...)"
            )
        return rows


def _flat(intended: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    return [(run, dest) for run, dests in intended.items() for dest in dests]


def command_user_system(
    command: str,
    *,
    boundaries: Sequence[str],
    prepare: Prepare | None = None,
    ledger: LedgerAdapter | type[LedgerAdapter] | None = None,
    intent: IntentQuery | None = None,
    env: Mapping[str, str] | None = None,
) -> System:
    """A ``System`` for a worker that is a program taking its work from ``jobs(config)``.

    The harness forks and exec's ``command`` (``python`` as its first word means the harness's
    own interpreter) with the case's settings in its environment; the program calls
    ``WorkerConfig.from_env()``. Like ``simple_system``: only the intake tables (and yours,
    through ``prepare``) are created, and without a ``ledger`` adapter only the invariants the
    providers' logs decide are judged. Scenario files reach this with ``system = "cmd:..."``
    plus ``boundaries = [...]`` (and ``prepare = "module:function"``, which may return the
    intended (run_id, destination) pairs as ``simple_system``'s does). ``env`` fills the
    program's own variables from templates (``harness.engine.plan._worker_env``). No
    ``boundaries``: the
    program calls no ``boundary()``, and its crash points are the sends and commits its dry
    run makes (``System.discover``).
    """
    if not boundaries:  # no boundary() in the program: crash where its dry run sends and commits
        name = f"cmd:{command}"
        prepare_case, reader, declared = _user_parts(name, ledger, prepare, intent)
        found = command_system(
            command,
            prepare=prepare_case,
            read_ledger=reader,
            boundaries=(),
            intent=declared,
            env=env,
        )
        return replace(found, discover=True)
    shape = simple_system(
        _never_called,
        name=f"cmd:{command}",
        boundaries=boundaries,
        ledger=ledger,
        prepare=prepare,
        intent=intent,
    )
    return command_system(
        command,
        prepare=shape.prepare,
        read_ledger=shape.read_ledger,
        boundaries=shape.boundaries,
        intent=shape.intent,
        env=env,
    )


def _never_called(config: WorkerConfig) -> None:  # pragma: no cover - replaced by the command
    raise AssertionError("a command system's worker is the program, not this function")
