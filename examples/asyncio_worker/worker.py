"""A small asyncio notification worker with its own ledger (two tables of its own).

The shape is a common one: intake writes one outbox row per (run, destination); an asyncio
loop starts one task per due row; each task waits for a sending slot, then sends with a key
derived from the row's identity and records the answer. A watchdog thread flags rows left due
for longer than a grace period, because a task that silently never runs raises nothing.

``keep_references`` is the whole difference between ``buggy`` and ``fixed``: asyncio keeps
only weak references to tasks, so a task suspended on a future that nothing else holds
strongly (here: a slot future kept in a ``WeakSet``) can be garbage-collected and simply
never run. The fix is a set that holds every task and a done-callback that discards it.

The harness parts are three: ``jobs(config)`` (the work), ``boundary(...)`` (crash points),
``note("overdue_flagged", ...)`` (the watchdog speaking), plus ``OutboxLedger``, the adapter
that shows the checkers this worker's own tables.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from dataclasses import dataclass
from typing import ClassVar

import requests
from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    insert,
    select,
    update,
)

from harness.systems import System
from harness.usersystem import LedgerAdapter, boundary, jobs, note, simple_system
from harness.worker_config import WorkerConfig

#: deliveries in flight at once
SLOTS = 4
#: longest idle sleep when the next due time is far (a wall-clock cap, not the due time)
IDLE_CAP_S = 0.05

metadata = MetaData()

#: one row per (run, destination); never deleted
outbox = Table(
    "notify_outbox",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("destination", String(200), nullable=False),
    Column("idem_key", String(128), nullable=False),
    Column("body", Text, nullable=False),
    Column("recognizer", String(32), nullable=False),
    #: queued | sent | unknown | failed | review
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("provider_id", String(128)),
    Column("error", Text),
    Column("created_by", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("due_at", Float, nullable=False),
    Column("first_sent_at", Float),
    Column("sent_at", Float),
    UniqueConstraint("run_id", "destination"),
)

#: append-only trail: enqueued, attempt, delivered, reconciled, unknown, retry, failed, overdue
events = Table(
    "notify_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("outbox_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("event", String(32), nullable=False),
    Column("worker", String(64), nullable=False),
    Column("idem_key", String(128)),
    Column("credential_id", String(64)),
    Column("destination_scope", String(200)),
    Column("detail", Text),
)

#: states that need no more work
DONE = ("sent", "failed", "review")


def create_tables(engine: Engine) -> None:
    metadata.create_all(engine)


@dataclass(frozen=True)
class Row:
    id: str
    run_id: str
    destination: str
    idem_key: str
    body: str
    recognizer: str
    state: str
    attempts: int
    first_sent_at: float | None


class Outbox:
    """Every durable step, one short transaction each."""

    def __init__(self, engine: Engine, config: WorkerConfig) -> None:
        self.engine = engine
        self.config = config
        self.clock = config.clock()

    def _event(self, conn: Connection, row: Row, event: str, detail: str | None = None) -> None:
        values = {
            "at": self.clock.now(),
            "outbox_id": row.id,
            "run_id": row.run_id,
            "event": event,
            "worker": self.config.worker_name,
            "idem_key": row.idem_key,
            "detail": detail,
        }
        if event == "attempt":
            values["credential_id"] = self.config.credential_id
            values["destination_scope"] = self.config.destination_scope
        conn.execute(insert(events).values(**values))

    def enqueue_all(self) -> None:
        """One row per intended send, created once (a restart finds them and adds nothing)."""
        todo = list(jobs(self.config))  # read before our write transaction takes the lock
        with self.engine.begin() as conn:
            have = set(conn.scalars(select(outbox.c.id)))
            for job in todo:
                if job.delivery_id in have:
                    continue
                now = self.clock.now()
                conn.execute(
                    insert(outbox).values(
                        id=job.delivery_id,
                        run_id=job.run_id,
                        destination=job.destination,
                        idem_key=job.idempotency_key,
                        body=job.body,
                        recognizer=job.recognizer,
                        state="queued",
                        attempts=0,
                        created_by=self.config.worker_name,
                        created_at=now,
                        due_at=now,
                    )
                )
                self._event(conn, self.get(job.delivery_id, conn), "enqueued")

    def get(self, delivery_id: str, conn: Connection | None = None) -> Row:
        query = select(
            outbox.c.id,
            outbox.c.run_id,
            outbox.c.destination,
            outbox.c.idem_key,
            outbox.c.body,
            outbox.c.recognizer,
            outbox.c.state,
            outbox.c.attempts,
            outbox.c.first_sent_at,
        ).where(outbox.c.id == delivery_id)
        if conn is not None:
            return Row(*conn.execute(query).one())
        with self.engine.connect() as own:
            return Row(*own.execute(query).one())

    def due_ids(self) -> list[str]:
        now = self.clock.now()
        with self.engine.connect() as conn:
            return list(
                conn.scalars(
                    select(outbox.c.id)
                    .where(outbox.c.state.not_in(DONE), outbox.c.due_at <= now)
                    .order_by(outbox.c.due_at, outbox.c.id)
                )
            )

    def next_due(self) -> float | None:
        with self.engine.connect() as conn:
            due = conn.scalar(select(func.min(outbox.c.due_at)).where(outbox.c.state.not_in(DONE)))
        return None if due is None else float(due)

    def _set(self, row: Row, event: str, detail: str | None = None, **values: object) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(outbox).where(outbox.c.id == row.id).values(**values))
            self._event(conn, row, event, detail)

    def record_attempt(self, row: Row) -> int:
        attempt = row.attempts + 1
        first = row.first_sent_at if row.first_sent_at is not None else self.clock.now()
        self._set(row, "attempt", f"attempt {attempt}", attempts=attempt, first_sent_at=first)
        return attempt

    def sent(self, row: Row, provider_id: str, *, how: str) -> None:
        now = self.clock.now()
        self._set(row, "delivered", how, state="sent", provider_id=provider_id, sent_at=now)
        if how == "reconciled":
            with self.engine.begin() as conn:
                self._event(conn, row, "reconciled", provider_id)

    def later(self, row: Row, state: str, why: str, *, retry_in: float) -> None:
        due = self.clock.now() + retry_in
        event = "unknown" if state == "unknown" else "retry"
        self._set(row, event, why, state=state, error=why, due_at=due)

    def give_up(self, row: Row, state: str, why: str) -> None:
        self._set(row, state, why, state=state, error=why)

    def flag_overdue(self, delivery_id: str, waited_s: float) -> None:
        row = self.get(delivery_id)
        with self.engine.begin() as conn:
            self._event(conn, row, "overdue", f"waited {waited_s:.3f}s")


class Sender:
    """One delivery, start to answer (runs in a thread: requests and the database block)."""

    def __init__(self, outbox: Outbox, config: WorkerConfig) -> None:
        self.outbox = outbox
        self.config = config
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {config.credential_secret}"
        self.url = config.provider_url.rstrip("/") + "/v1/messages"

    def deliver(self, delivery_id: str) -> None:
        row = self.outbox.get(delivery_id)
        if row.state in DONE:
            return
        boundary("after_claim")
        if row.attempts > 0:
            if self.reconcile(row):
                return
            if row.attempts >= self.config.max_attempts:
                self.outbox.give_up(row, "failed", "attempts exhausted")
                return
            margin = self.config.request_timeout_s
            first = row.first_sent_at or 0.0
            if self.outbox.clock.now() + margin >= first + self.config.key_window_s:
                self.outbox.give_up(row, "review", "key window passed; a resend is unsafe")
                return
            boundary("before_retry")
        attempt = self.outbox.record_attempt(row)
        try:
            resp = self.session.post(
                self.url,
                json={
                    "destination": row.destination,
                    "run_id": row.run_id,
                    "delivery_id": row.id,
                    "body": row.body,
                    "recognizer": row.recognizer,
                },
                headers={"Idempotency-Key": row.idem_key},
                timeout=self.config.request_timeout_s,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            # The provider may well have accepted it: unknown, to be reconciled, never failed.
            retry_in = self.config.backoff(attempt)
            self.outbox.later(row, "unknown", type(exc).__name__, retry_in=retry_in)
            return
        if 200 <= resp.status_code < 300:
            boundary("after_provider_accept")
            self.outbox.sent(row, str(resp.json()["id"]), how="accepted")
            boundary("after_ack")
        elif resp.status_code == 429 or resp.status_code >= 500:
            wait = max(self.config.backoff(attempt), float(resp.headers.get("Retry-After", 0)))
            self.outbox.later(row, "queued", f"HTTP {resp.status_code}", retry_in=wait)
        else:
            self.outbox.give_up(row, "failed", f"HTTP {resp.status_code}: {resp.text[:200]}")

    def reconcile(self, row: Row) -> bool:
        """Ask the provider whether an earlier attempt landed; True if that settled it."""
        boundary("before_reconcile")
        try:
            resp = self.session.get(
                self.url,
                params={"idempotency_key": row.idem_key},
                timeout=self.config.request_timeout_s,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            self.outbox.later(row, "unknown", f"lookup: {type(exc).__name__}", retry_in=1.0)
            return True
        if resp.status_code == 200:
            self.outbox.sent(row, str(resp.json()["id"]), how="reconciled")
            boundary("after_ack")
            return True
        if resp.status_code != 404:
            self.outbox.later(row, "unknown", f"lookup: HTTP {resp.status_code}", retry_in=1.0)
            return True
        return False


class Deliverer:
    """The asyncio loop: one task per due row, each waiting for a sending slot."""

    def __init__(self, outbox: Outbox, config: WorkerConfig, *, keep_references: bool) -> None:
        self.outbox = outbox
        self.config = config
        self.sender = Sender(outbox, config)
        self.keep_references = keep_references
        self.tasks: set[asyncio.Task[None]] = set()
        #: scheduled and not finished
        self.in_flight: set[str] = set()
        #: holding a slot (the watchdog leaves these alone)
        self.sending: set[str] = set()
        #: a registry must not keep abandoned waiters alive, so it holds them weakly
        self.waiters: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            fresh = [d for d in self.outbox.due_ids() if d not in self.in_flight]
            for delivery_id in fresh:
                self.in_flight.add(delivery_id)
                task = loop.create_task(self.deliver(delivery_id))
                if self.keep_references:  # the fix: hold the task until it is done
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
            if fresh:
                await asyncio.sleep(0)  # every new task runs up to its wait for a slot
                boundary("delivery_tasks_scheduled")
            self.grant_slots()
            if self.in_flight:
                await asyncio.sleep(0.002)
                continue
            due = self.outbox.next_due()
            if due is None:
                self.sender.session.close()
                return
            clock = self.outbox.clock
            await asyncio.to_thread(
                clock.sleep_until, due, autojump=self.config.autojump, cap_s=IDLE_CAP_S
            )

    def grant_slots(self) -> None:
        free = SLOTS - len(self.sending)
        for waiter in [w for w in self.waiters if not w.done()][: max(free, 0)]:
            waiter.set_result(None)

    async def deliver(self, delivery_id: str) -> None:
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(slot)
        await slot  # outside the try: a collected task never reaches the finally below
        self.sending.add(delivery_id)
        try:
            await asyncio.to_thread(self.sender.deliver, delivery_id)
        finally:
            self.sending.discard(delivery_id)
            self.in_flight.discard(delivery_id)


class Watchdog:
    """A thread that flags rows left due and not sending for longer than the grace period.

    It checks for the absence of success: a loop whose tasks vanished has no errors at all.
    "Left" is measured on the watchdog's own monotonic clock from when it first saw the row
    due, so a clock jump or a restart does not make everything overdue at once.
    """

    def __init__(self, outbox: Outbox, deliverer: Deliverer, config: WorkerConfig) -> None:
        self.outbox = outbox
        self.deliverer = deliverer
        self.config = config
        self.flagged: set[str] = set()
        self.first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        grace = self.config.liveness_grace_s
        while not self._stop.wait(self.config.watchdog_interval_s):
            try:
                waiting = [d for d in self.outbox.due_ids() if d not in self.deliverer.sending]
            except Exception:  # the database is busy: look again next tick
                continue
            now = time.monotonic()
            for gone in set(self.first_seen) - set(waiting):
                del self.first_seen[gone]
            for delivery_id in waiting:
                seen = self.first_seen.setdefault(delivery_id, now)
                if delivery_id in self.flagged or now - seen <= grace:
                    continue
                self.flagged.add(delivery_id)
                self.outbox.flag_overdue(delivery_id, now - seen)
                note(
                    "overdue_flagged",
                    delivery_id=delivery_id,
                    waited_s=round(now - seen, 4),
                    grace_s=grace,
                )


def run(config: WorkerConfig, *, keep_references: bool) -> None:
    """The worker's entry point: enqueue, then deliver until every row is settled."""
    engine = config.db.engine()
    try:
        box = Outbox(engine, config)
        box.enqueue_all()
        boundary("after_delivery_enqueue")
        deliverer = Deliverer(box, config, keep_references=keep_references)
        watchdog = Watchdog(box, deliverer, config)
        watchdog.start()
        try:
            asyncio.run(deliverer.run())
        finally:
            watchdog.stop()
    finally:
        engine.dispose()


class OutboxLedger(LedgerAdapter):
    """What the checkers read, from this worker's own two tables."""

    deliveries_sql = """
        SELECT id AS delivery_id, run_id, destination, state AS status, idem_key AS key,
               created_by, provider_id AS provider_message_id, attempts AS attempt_count,
               created_at, due_at AS next_attempt_at, first_sent_at AS first_attempt_at,
               sent_at AS acknowledged_at, error AS last_error
        FROM notify_outbox ORDER BY created_at, id
    """
    audit_sql = """
        SELECT id AS event_id, outbox_id AS delivery_id, run_id, event, worker, at,
               idem_key AS idempotency_key, credential_id, destination_scope, detail
        FROM notify_events ORDER BY id
    """
    state_counts_sql = "SELECT state, COUNT(*) FROM notify_outbox GROUP BY state"
    states: ClassVar[dict[str, str]] = {"queued": "pending", "sent": "delivered"}


#: where this worker can be crashed, in the order it reaches them
BOUNDARIES = (
    "after_delivery_enqueue",
    "delivery_tasks_scheduled",
    "after_claim",
    "before_reconcile",
    "before_retry",
    "after_provider_accept",
    "after_ack",
)


def system(name: str, *, keep_references: bool) -> System:
    def main(config: WorkerConfig) -> None:
        run(config, keep_references=keep_references)

    return simple_system(
        main,
        name=name,
        boundaries=BOUNDARIES,
        ledger=OutboxLedger,
        prepare=create_tables,
        description="asyncio worker, "
        + ("tasks held until done" if keep_references else "fire-and-forget tasks"),
    )
