"""Named crash points that a worker declares in its own code.

A boundary must cost next to nothing when the harness is not driving the process (production
code keeps its ``boundary()`` calls), so the disarmed path is one global load and one
comparison. When the harness drives the process, every hit is appended to the run's trace file
*before* any armed action runs: a worker killed at a boundary has always said where it was.

Armed actions:

- ``crash``: SIGKILL (a real signal: no handler or ``finally`` runs) either the whole worker
  (scope ``worker``, the default: every process of its tree, as a lost machine or an OOM-killed
  container would), only the process that reached the boundary (scope ``process``: a pool
  child or work-horse dies and the rest of the worker sees it die), or the worker's first
  process alone (scope ``parent``: Celery's main process or RQ's worker above a work-horse
  that holds the task and goes on, orphaned);
- ``pause``: tell the harness "paused here" on the events pipe, then block until it answers
  on the control pipe (continue, crash or raise), so the harness can act in between without
  guessing with sleeps;
- ``hang``: stop making progress forever while staying alive (a stalled event loop);
- ``raise``: raise ``InjectedError``. Unlike a crash, the worker's handlers and ``finally``
  blocks run, and can hide exactly the bug a SIGKILL would expose.

Hits are counted per worker, across its whole process tree: with a counter directory (the
harness always gives one) the third ``after_provider_accept`` is the third reached by any
process of the worker, be it the main process or the second job's work-horse.

This module imports nothing heavy on purpose; ``import harness`` stays cheap for user code.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass

from harness.engine.process._tree import ProcessTree
from harness.engine.store.trace import trace_clock

#: Environment variable through which an exec'd worker learns its trace file and crash plan.
CONTROL_ENV = "CRASH_HARNESS_CONTROL"

#: Actions a boundary can be armed with.
ACTIONS = ("crash", "pause", "hang", "raise")
#: What a crash kills: the whole worker (its process tree), the process at the boundary, or
#: the worker's first process alone while the one at the boundary (a child holding the task)
#: lives on.
SCOPES = ("worker", "process", "parent")


class InjectedError(Exception):
    """Raised by a boundary armed with ``raise``: an exception, deliberately *not* a crash."""


@dataclass(frozen=True)
class Arm:
    """Do ``action`` on hits ``hit`` .. ``hit + count - 1`` of ``boundary`` (1-based)."""

    boundary: str
    hit: int = 1
    action: str = "crash"
    count: int = 1
    #: for ``crash`` (and a paused worker told to crash): what dies
    scope: str = "worker"

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown boundary action {self.action!r}; expected one of {ACTIONS}")
        if self.scope not in SCOPES:
            raise ValueError(f"unknown crash scope {self.scope!r}; expected one of {SCOPES}")
        if self.hit < 1 or self.count < 1:
            raise ValueError(f"arm {self.boundary}: hit and count must be >= 1")

    def covers(self, n: int) -> bool:
        return self.hit <= n < self.hit + self.count

    def to_json(self) -> dict[str, object]:
        return {
            "boundary": self.boundary,
            "hit": self.hit,
            "action": self.action,
            "count": self.count,
            "scope": self.scope,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Arm:
        hit = data.get("hit", 1)
        count = data.get("count", 1)
        if not isinstance(hit, int) or not isinstance(count, int):
            raise TypeError(f"arm hit and count must be ints, got {hit!r}, {count!r}")
        return cls(
            boundary=str(data["boundary"]),
            hit=hit,
            action=str(data.get("action", "crash")),
            count=count,
            scope=str(data.get("scope", "worker")),
        )


class _Tracer:
    """Per-process boundary state: hit counts, the plan, the trace file and control pipes."""

    __slots__ = (
        "arms",
        "clock",
        "control_fd",
        "counter_dir",
        "counter_fds",
        "counts",
        "events_fd",
        "fd",
        "pid",
        "trace_path",
        "tree",
        "worker",
    )

    def __init__(
        self,
        trace_path: str,
        worker: str,
        arms: list[Arm],
        events_fd: int | None,
        control_fd: int | None,
        tree: ProcessTree | None = None,
        counter_dir: str | None = None,
    ) -> None:
        self.fd = os.open(trace_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.trace_path = trace_path
        self.clock = trace_clock(trace_path)
        self.worker = worker
        self.pid = os.getpid()
        self.counts: dict[str, int] = {}
        self.arms = arms
        self.events_fd = events_fd
        self.control_fd = control_fd
        self.tree = tree
        self.counter_dir = counter_dir
        self.counter_fds: dict[str, int] = {}
        if counter_dir is not None:
            os.makedirs(counter_dir, exist_ok=True)

    def _record(
        self, event: str, name: str, n: int, detail: Mapping[str, object] | None = None
    ) -> None:
        record: dict[str, object] = {
            "t": time.time(),
            "event": event,
            "boundary": name,
            "hit": n,
            "worker": self.worker,
            "pid": self.pid,
        }
        if detail:
            record["detail"] = dict(detail)
        if self.clock is not None:
            record["c"] = self.clock.now()
        # One write(2) on an O_APPEND descriptor: the line is in the kernel before we act.
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    def _count(self, name: str) -> int:
        """This hit's number, counted over every process of the worker."""
        if self.counter_dir is None:
            n = self.counts.get(name, 0) + 1
            self.counts[name] = n
            return n
        fd = self.counter_fds.get(name)
        if fd is None:
            path = os.path.join(self.counter_dir, name)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self.counter_fds[name] = fd
        # POSIX record locks belong to a process, so an inherited descriptor still excludes.
        fcntl.lockf(fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(fd, 20, 0)
            n = (int(raw) if raw.strip() else 0) + 1
            os.pwrite(fd, b"%20d" % n, 0)
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN)
        return n

    def hit(self, name: str, detail: Mapping[str, object] | None = None) -> None:
        """Count this hit of ``name``, record it (with ``detail``: a discovered point's
        target) and do whatever the plan armed there."""
        if os.getpid() != self.pid:
            # A forked child (a pool process, a work-horse) is part of the same worker; with
            # no counter directory its hits are counted on their own.
            self.pid = os.getpid()
            self.counts = {}
        n = self._count(name)
        arm = next((a for a in self.arms if a.boundary == name and a.covers(n)), None)
        action = None if arm is None else arm.action
        self._record("hit" if action is None else action, name, n, detail)
        if arm is None or action is None:
            return
        if action == "pause":
            action = self._pause(name, n)
        if action == "crash":
            self.crash(arm.scope)
        elif action == "hang":
            if self.events_fd is not None:
                os.write(self.events_fd, f"hung {name} {n}\n".encode())
            while True:
                signal.pause()
        elif action == "raise":
            raise InjectedError(f"injected at boundary {name} hit {n}")

    def crash(self, scope: str) -> None:
        """SIGKILL the whole worker, or only this process (neither returns), or the worker's
        first process while this one, a child at work, goes on (``parent``: returns)."""
        if scope == "parent" and self.tree is not None and self.tree.root != os.getpid():
            os.kill(self.tree.root, signal.SIGKILL)
            return
        if scope == "worker" and self.tree is not None:
            self.tree.kill()
        os.kill(os.getpid(), signal.SIGKILL)

    def _pause(self, name: str, n: int) -> str:
        if self.events_fd is None or self.control_fd is None:
            raise RuntimeError(f"boundary {name} armed to pause, but no control pipe was given")
        os.write(self.events_fd, f"paused {name} {n}\n".encode())
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = os.read(self.control_fd, 64)
            if not chunk:  # the harness went away: behave as if killed
                self.crash("worker")
            answer += chunk
        verb = answer.decode().strip()
        self._record("resume" if verb == "continue" else verb, name, n)
        if verb == "gc":
            # A collection at a moment of the harness's choosing: tasks that nothing holds
            # strongly vanish here, as they would whenever the collector happens to run.
            import gc

            gc.collect()
            return "continue"
        return verb

    def unnamed(self, kind: str, detail: dict[str, object]) -> None:
        """A send or commit the hooks saw and could not name (``_hooks``): in the trace as
        seen, never counted, armed or crashed, so coverage can say it was missed."""
        record: dict[str, object] = {
            "t": time.time(),
            "event": "unnamed_point",
            "worker": self.worker,
            "pid": os.getpid(),
            "detail": {"kind": kind, **detail},
        }
        if self.clock is not None:
            record["c"] = self.clock.now()
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    def note(self, event: str, detail: dict[str, object]) -> None:
        """A worker-side observation (e.g. an overdue delivery) for the trace and the harness."""
        record = {
            "t": time.time(),
            "event": event,
            "worker": self.worker,
            "pid": os.getpid(),
            "detail": detail,
        }
        if self.clock is not None:
            record["c"] = self.clock.now()
        os.write(self.fd, (json.dumps(record) + "\n").encode())
        if self.events_fd is not None:
            os.write(self.events_fd, f"{event} {detail.get('delivery_id', '-')} 0\n".encode())


_tracer: _Tracer | None = None


def boundary(name: str) -> None:
    """Mark a named crash point; a no-op unless the harness armed this process."""
    if _tracer is None:
        return
    _tracer.hit(name)


def note(event: str, **detail: object) -> None:
    """Tell the harness about something the worker noticed (no-op when not driven)."""
    if _tracer is not None:
        _tracer.note(event, detail)


def configure(
    *,
    trace_path: str,
    worker: str,
    arms: list[Arm],
    events_fd: int | None = None,
    control_fd: int | None = None,
    tree: ProcessTree | None = None,
    counter_dir: str | None = None,
) -> None:
    """Arm this process (called by the supervisor in a forked child)."""
    global _tracer
    _tracer = _Tracer(trace_path, worker, arms, events_fd, control_fd, tree, counter_dir)


def disarm() -> None:
    """Return to the zero-cost path (used by tests and after a fork that must not trace)."""
    global _tracer
    if _tracer is not None:
        os.close(_tracer.fd)
    _tracer = None


def control_env(
    *,
    trace_path: str,
    worker: str,
    arms: list[Arm],
    events_fd: int | None = None,
    control_fd: int | None = None,
    tree: ProcessTree | None = None,
    counter_dir: str | None = None,
) -> str:
    """Serialise a plan for a worker that the harness exec's rather than forks."""
    return json.dumps(
        {
            "trace": trace_path,
            "worker": worker,
            "arms": [a.to_json() for a in arms],
            "events_fd": events_fd,
            "control_fd": control_fd,
            "events_id": _identity(events_fd),
            "control_id": _identity(control_fd),
            "tree": None if tree is None else tree.to_json(),
            "counters": counter_dir,
        }
    )


def handoff_env() -> dict[str, str]:
    """The environment that arms a program this process is about to exec, with the same plan
    and the same pipes (made inheritable here); empty when this process is not driven."""
    if _tracer is None:
        return {}
    for fd in (_tracer.events_fd, _tracer.control_fd):
        if fd is not None:
            os.set_inheritable(fd, True)  # noqa: FBT003 - a builtin, positional only
    return {
        CONTROL_ENV: control_env(
            trace_path=_tracer.trace_path,
            worker=_tracer.worker,
            arms=_tracer.arms,
            events_fd=_tracer.events_fd,
            control_fd=_tracer.control_fd,
            tree=_tracer.tree,
            counter_dir=_tracer.counter_dir,
        )
    }


def _identity(fd: int | None) -> list[int] | None:
    """What tells this pipe from any other file that may later have its number."""
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def _pipe_or_none(fd: object, identity: object) -> int | None:
    """``fd`` if this process still holds the harness's very pipe there: a grandchild started
    by ``subprocess`` (which closes what it was not passed) inherits the plan but not the
    pipes, and must not write "paused" into whatever file now has that number."""
    if not isinstance(fd, int):
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if not stat.S_ISFIFO(st.st_mode):
        return None
    return fd if identity is None or identity == [st.st_dev, st.st_ino] else None


def _configure_from_env() -> None:
    raw = os.environ.get(CONTROL_ENV)
    if not raw:
        return
    data = json.loads(raw)
    tree = data.get("tree")
    configure(
        trace_path=data["trace"],
        worker=data["worker"],
        arms=[Arm.from_json(a) for a in data.get("arms", [])],
        events_fd=_pipe_or_none(data.get("events_fd"), data.get("events_id")),
        control_fd=_pipe_or_none(data.get("control_fd"), data.get("control_id")),
        tree=None if tree is None else ProcessTree.from_json(tree),
        counter_dir=data.get("counters"),
    )


_configure_from_env()
