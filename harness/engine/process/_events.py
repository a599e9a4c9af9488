"""What a running worker says on its events pipe: paused at a boundary, hung, overdue.

The harness reads these lines while it waits, and a worker's end is an answer too (its
pidfd turns readable, or the pipe closes), so each read here watches both. The waiting
itself is the supervisor's (``Poll``), which also watches the case's lifelines; this module
knows only the pipe and its lines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.engine.process._running import RunningWorker
from harness.engine.process._waiting import pidfd_of
from harness.errors import SupervisorError

#: wait until one of ``fds`` is readable or ``timeout_s`` passes: the ready ones
Poll = Callable[[list[int], float | None], list[int]]


@dataclass(frozen=True)
class Paused:
    """A worker holding at a boundary, waiting for ``Supervisor.release``."""

    worker: RunningWorker
    boundary: str
    hit: int


@dataclass(frozen=True)
class WorkerEvent:
    """A line a worker wrote on its events pipe: paused, hung, or overdue_flagged."""

    kind: str
    subject: str
    hit: int
    at: float


def wait_paused(worker: RunningWorker, poll: Poll, *, timeout_s: float) -> Paused | None:
    """``Supervisor.wait_paused``: the worker's next pause, None if it ended first."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(0.0, deadline - time.monotonic())
        event = wait_event(worker, poll, timeout_s=left)
        if event is None:
            return None
        if event.kind == "overdue_flagged":
            continue
        if event.kind != "paused":
            raise SupervisorError(f"expected {worker.name} to pause, it said {event.kind}")
        return Paused(worker, event.subject, event.hit)


def wait_event(
    worker: RunningWorker, poll: Poll, *, timeout_s: float, quiet_ok: bool = False
) -> WorkerEvent | None:
    """``Supervisor.wait_event``: the worker's next line, None if it ended first."""
    assert worker.events_fd is not None, "worker has no events pipe"
    deadline = time.monotonic() + timeout_s
    pidfd = pidfd_of(worker.pid)
    try:
        while b"\n" not in worker.pending:
            left = max(0.0, deadline - time.monotonic())
            ready = poll([worker.events_fd, pidfd], left)
            if worker.events_fd in ready:
                chunk = os.read(worker.events_fd, 4096)
                if chunk:
                    worker.pending += chunk
                    continue
                return None  # pipe closed: the worker is gone
            if pidfd in ready:
                return None
            if not ready:
                if quiet_ok:
                    return None
                raise SupervisorError(f"worker {worker.name} sent no event within {timeout_s}s")
    finally:
        os.close(pidfd)
    return _take_event(worker)


def next_event(
    workers: list[RunningWorker], poll: Poll, *, timeout_s: float
) -> tuple[RunningWorker, WorkerEvent | None] | None:
    """``Supervisor.next_event``: the first line any of ``workers`` writes, or the first
    of them to end."""
    for worker in workers:
        if b"\n" in worker.pending:
            return worker, _take_event(worker)
    deadline = time.monotonic() + timeout_s
    pidfds = {w.pid: pidfd_of(w.pid) for w in workers}
    try:
        while True:
            by_fd = {w.events_fd: w for w in workers if w.events_fd is not None}
            left = max(0.0, deadline - time.monotonic())
            ready = set(poll([*by_fd, *pidfds.values()], left))
            if not ready:
                return None
            for fd in ready & set(by_fd):
                worker = by_fd[fd]
                chunk = os.read(fd, 4096)
                if not chunk:
                    return worker, None  # pipe closed: the worker is gone
                worker.pending += chunk
                if b"\n" in worker.pending:
                    return worker, _take_event(worker)
            for worker in workers:
                if pidfds[worker.pid] in ready and worker.events_fd not in ready:
                    return worker, None
    finally:
        for fd in pidfds.values():
            os.close(fd)


def _take_event(worker: RunningWorker) -> WorkerEvent:
    """The first whole line of what the worker sent, taken off its ``pending`` bytes."""
    line, _, worker.pending = worker.pending.partition(b"\n")
    kind, subject, hit = line.decode().split()
    return WorkerEvent(kind, subject, int(hit), time.time())
