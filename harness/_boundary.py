"""Named crash points that a worker declares in its own code.

A boundary must cost next to nothing when the harness is not driving the process (production
code keeps its ``boundary()`` calls), so the disarmed path is one global load and one
comparison. When the harness drives the process, every hit is appended to the run's trace file
*before* any armed action runs: a worker killed at a boundary has always said where it was.

This module imports nothing heavy on purpose; ``import harness`` stays cheap for user code.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

#: Environment variable through which an exec'd worker learns its trace file and crash plan.
CONTROL_ENV = "CRASH_HARNESS_CONTROL"

#: Actions a boundary can be armed with in this release.
ACTIONS = ("crash",)


@dataclass(frozen=True)
class Arm:
    """One armed action: do ``action`` the ``hit``-th time ``boundary`` is reached."""

    boundary: str
    hit: int = 1
    action: str = "crash"

    def to_json(self) -> dict[str, object]:
        return {"boundary": self.boundary, "hit": self.hit, "action": self.action}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Arm:
        hit = data.get("hit", 1)
        if not isinstance(hit, int):
            raise TypeError(f"arm hit must be an int, got {hit!r}")
        return cls(boundary=str(data["boundary"]), hit=hit, action=str(data.get("action", "crash")))


class _Tracer:
    """Per-process boundary state: hit counts, the plan, and the open trace file."""

    __slots__ = ("counts", "fd", "pid", "plan", "worker")

    def __init__(self, trace_path: str, worker: str, arms: list[Arm]) -> None:
        self.fd = os.open(trace_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.worker = worker
        self.pid = os.getpid()
        self.counts: dict[str, int] = {}
        self.plan = {(a.boundary, a.hit): a.action for a in arms}

    def hit(self, name: str) -> None:
        if os.getpid() != self.pid:
            # A forked grandchild inherits our state; its hits are its own.
            self.pid = os.getpid()
            self.counts = {}
        n = self.counts.get(name, 0) + 1
        self.counts[name] = n
        action = self.plan.get((name, n))
        record = {
            "t": time.time(),
            "event": "hit" if action is None else action,
            "boundary": name,
            "hit": n,
            "worker": self.worker,
            "pid": self.pid,
        }
        # One write(2) on an O_APPEND descriptor: the line is in the kernel before we die.
        os.write(self.fd, (json.dumps(record) + "\n").encode())
        if action == "crash":
            os.kill(self.pid, signal.SIGKILL)


_tracer: _Tracer | None = None


def boundary(name: str) -> None:
    """Mark a named crash point; a no-op unless the harness armed this process."""
    if _tracer is None:
        return
    _tracer.hit(name)


def configure(*, trace_path: str, worker: str, arms: list[Arm]) -> None:
    """Arm this process (called by the supervisor in a forked child)."""
    global _tracer
    _tracer = _Tracer(trace_path, worker, arms)


def disarm() -> None:
    """Return to the zero-cost path (used by tests and after a fork that must not trace)."""
    global _tracer
    if _tracer is not None:
        os.close(_tracer.fd)
    _tracer = None


def control_env(*, trace_path: str, worker: str, arms: list[Arm]) -> str:
    """Serialise a plan for a worker that the harness exec's rather than forks."""
    return json.dumps({"trace": trace_path, "worker": worker, "arms": [a.to_json() for a in arms]})


def _configure_from_env() -> None:
    raw = os.environ.get(CONTROL_ENV)
    if not raw:
        return
    data = json.loads(raw)
    configure(
        trace_path=data["trace"],
        worker=data["worker"],
        arms=[Arm.from_json(a) for a in data.get("arms", [])],
    )


_configure_from_env()
