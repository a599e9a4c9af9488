"""The reference's asyncio delivery path, and the watchdog that notices when it goes quiet.

Moving sending off the request path into background tasks is the obvious thing to do, and it
brings a failure with no exception: asyncio keeps only weak references to tasks, so a task
suspended on a future that nothing else holds can be garbage-collected and simply never run.
The fix is three lines (a set that holds every task, a done-callback that discards it); the
mutant ``fire_and_forget_task`` leaves them out.

Each due delivery gets a task that first waits for a sending slot. Slot waiters are kept in a
``WeakSet`` (a registry must not keep abandoned waiters alive), so a waiting task is reachable
only through its own future: exactly the shape the collector can take away.

The watchdog runs in its own thread, so a stalled event loop cannot silence it, and flags any
queued delivery that is past due by more than the grace period. It checks for the absence of
success, because a worker that never runs has an error rate of zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import Protocol

from harness import boundary, note
from harness.errors import LeaseLostError
from harness.reference.ledger import Claim, Ledger
from harness.worker_config import WorkerConfig


class ReferenceWorker(Protocol):
    """What the tasks need of the worker that runs them (``harness.reference.worker``'s
    ``ReferenceWorker``): a protocol, so this module never imports the worker that imports it."""

    config: WorkerConfig
    ledger: Ledger

    def idle(self, wake: tuple[float | None, float | None]) -> None: ...

    def deliver(self, claim: Claim) -> None: ...


#: how many deliveries may be in flight at once
SLOTS = 4


class AsyncDelivery:
    """One task per due delivery; holds strong references unless told not to (the mutant)."""

    def __init__(self, worker: ReferenceWorker, *, keep_references: bool = True) -> None:
        self.worker = worker
        self.keep_references = keep_references
        self.tasks: set[asyncio.Task[None]] = set()
        self.in_flight: set[str] = set()
        self.waiters: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()

    def run(self) -> None:
        asyncio.run(self.schedule())

    async def schedule(self) -> None:
        loop = asyncio.get_running_loop()
        ledger = self.worker.ledger
        while True:
            fresh = [d for d in ledger.due_ids() if d not in self.in_flight]
            for delivery_id in fresh:
                self.in_flight.add(delivery_id)
                task = loop.create_task(self.deliver_one(delivery_id))
                if self.keep_references:
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
            if fresh:
                await asyncio.sleep(0)  # every new task runs up to its wait for a slot
                boundary("delivery_tasks_scheduled")
            self.grant_slots()
            if self.in_flight:
                await asyncio.sleep(0.001)
                continue
            wake = ledger.next_wakeup()
            if wake is None:
                return
            await asyncio.to_thread(self.worker.idle, wake)

    def grant_slots(self) -> None:
        for waiter in list(self.waiters)[:SLOTS]:
            if not waiter.done():
                waiter.set_result(None)

    async def deliver_one(self, delivery_id: str) -> None:
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(slot)
        await slot
        try:
            claim = self.worker.ledger.claim_next(only=delivery_id)
            if claim is not None:
                with contextlib.suppress(LeaseLostError):
                    self.worker.deliver(claim)
        finally:
            self.in_flight.discard(delivery_id)


class Watchdog:
    """A thread that flags deliveries left due and untouched for longer than the grace period.

    "Untouched" is measured by the watchdog's own wall clock, from the moment it first sees a
    delivery due and unclaimed: a clock jump or a restart does not make everything overdue at
    once, and a worker sitting on due work for ``liveness_grace_s`` real seconds always is.
    """

    def __init__(self, worker: ReferenceWorker) -> None:
        self.worker = worker
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
        config = self.worker.config
        while not self._stop.wait(config.watchdog_interval_s):
            try:
                waiting = self.worker.ledger.waiting_ids()
            except Exception:  # the database is busy or going away: look again next tick
                continue
            now = time.monotonic()
            for gone in set(self.first_seen) - set(waiting):
                del self.first_seen[gone]
            for delivery_id in waiting:
                seen = self.first_seen.setdefault(delivery_id, now)
                if delivery_id in self.flagged or now - seen <= config.liveness_grace_s:
                    continue
                self.flagged.add(delivery_id)
                self.worker.ledger.record_overdue(delivery_id, waited_s=now - seen)
                note(
                    "overdue_flagged",
                    delivery_id=delivery_id,
                    waited_s=round(now - seen, 4),
                    grace_s=config.liveness_grace_s,
                )
