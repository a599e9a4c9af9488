"""Whether the machine, not the system, made a worker late: how long its processes waited
for a CPU they were ready to use.

A deadline (a settle deadline, a liveness budget) measures the system only if the system
ran. On a shared CI runner at load 12 on 2 cores a worker can spend most of a deadline
runnable and not running; blaming it for the miss is a false alarm. A really stalled worker
(a stopped event loop, a task that never started, a process blocked or stopped) is not
*waiting for CPU*: it sleeps. So low CPU use is never the signal, only time spent
runnable-and-not-running, which a stall does not accumulate:

- **cgroup mode**: the worker's own cgroup's ``cpu.pressure`` ``some total`` (time during
  which at least one of its tasks was runnable and not running) and ``cpu.stat usage_usec``;
- **walk mode**: ``/proc/PID/task/TID/schedstat`` (time on a CPU, time waiting on a run
  queue) summed over the tree's live threads. A process that already ended takes its figures
  with it, so walk mode can only under-count the wait: it never excuses a stall.

Both count from the worker's spawn (a fresh cgroup per worker, a fresh process). A verdict
is judged on the window it depends on (from a worker's first sign of life to its settle
deadline, a liveness budget, the last few seconds of a start-up), as the difference of two
samples (``CpuWatch``): a worker that waited for CPU while it imported, on a busy machine,
and then stalled, is not excused by its start. ``starved`` is a share of that window: see
``STARVED_SHARE``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from harness._tree import ProcessTree

#: a worker that spent at least this share of its life since spawn ready to run and not
#: running was starved: its deadline measured the machine at least as much as the system.
#: A correct worker on an idle machine waits ~0 %; a busy one at load 12 on 2 cores ~80 %;
#: a stalled one waits ~0 % on any machine (it is not runnable).
STARVED_SHARE = 0.25


@dataclass(frozen=True)
class CpuWait:
    """How long a worker's tree waited for CPU, and ran, over its life so far."""

    worker: str
    #: where the figures come from: "cgroup cpu.pressure", "schedstat", or "unmeasured"
    source: str
    #: wall seconds of the window judged
    window_s: float
    #: seconds runnable and not running (None: unmeasured)
    waited_s: float | None
    #: seconds on a CPU (None: unmeasured)
    ran_s: float | None

    @property
    def share(self) -> float | None:
        if self.waited_s is None or self.window_s <= 0:
            return None
        return self.waited_s / self.window_s

    @property
    def starved(self) -> bool:
        share = self.share
        return share is not None and share >= STARVED_SHARE

    def to_json(self) -> dict[str, Any]:
        share = self.share
        return {
            "worker": self.worker,
            "source": self.source,
            "window_s": round(self.window_s, 3),
            "waited_for_cpu_s": None if self.waited_s is None else round(self.waited_s, 3),
            "ran_s": None if self.ran_s is None else round(self.ran_s, 3),
            "wait_share": None if share is None else round(share, 3),
            "starved_share": STARVED_SHARE,
            "starved": self.starved,
        }

    def describe(self) -> str:
        """One line with the figures, for notes and summaries."""
        if self.waited_s is None:
            return f"{self.worker}: CPU wait unmeasured ({self.source})"
        ran = "" if self.ran_s is None else f", ran {self.ran_s:.2f}s"
        return (
            f"{self.worker} waited {self.waited_s:.2f}s for CPU in a {self.window_s:.2f}s "
            f"window ({100 * (self.share or 0):.0f}%{ran}; {self.source}; starved at "
            f"{100 * STARVED_SHARE:.0f}% or more)"
        )


@dataclass(frozen=True)
class CpuSample:
    """Cumulative figures of one worker's tree since its spawn, at wall time ``at``."""

    source: str
    at: float
    waited_s: float | None
    ran_s: float | None


def sample(tree: ProcessTree | None) -> CpuSample:
    """Read the tree's cumulative CPU wait and use now."""
    now = time.time()
    if tree is None:
        return CpuSample("unmeasured", now, None, None)
    if tree.cgroup is not None:
        waited = _pressure_total_s(tree.cgroup)
        if waited is not None:
            return CpuSample("cgroup cpu.pressure", now, waited, _usage_s(tree.cgroup))
    found = _schedstat(tree.members())
    if found is None:
        return CpuSample("unmeasured", now, None, None)
    return CpuSample("schedstat", now, found[1], found[0])


class CpuWatch:
    """Samples of one worker's CPU wait, so a window ending now can be judged."""

    #: samples kept (a daemon polled every 0.2 s for a 30 s deadline takes 150)
    KEEP = 2000

    def __init__(self, worker: str, tree: ProcessTree | None, started_at: float) -> None:
        self.worker = worker
        self.tree = tree
        #: the spawn: nothing waited, nothing ran
        self.spawn = CpuSample("spawn", started_at, 0.0, 0.0)
        self._samples: list[CpuSample] = [self.spawn]

    def mark(self) -> CpuSample:
        """Sample now and keep it: a window may start here."""
        now = sample(self.tree)
        self._samples.append(now)
        if len(self._samples) > self.KEEP:
            del self._samples[1 : len(self._samples) // 2]  # the spawn stays
        return now

    def since(self, start: CpuSample | None = None) -> CpuWait:
        """The window from ``start`` (the spawn by default) to now."""
        return between(self.worker, start or self.spawn, self.mark())

    def recent(self, seconds: float) -> CpuWait:
        """The window from the newest kept sample at least ``seconds`` old to now."""
        now = self.mark()
        start = next((s for s in reversed(self._samples) if now.at - s.at >= seconds), self.spawn)
        return between(self.worker, start, now)


def between(worker: str, start: CpuSample, end: CpuSample) -> CpuWait:
    """The figures of the window from ``start`` to ``end`` (a process that ended between
    them takes its share with it in walk mode: the wait is never over-counted)."""
    window = max(0.0, end.at - start.at)
    if end.waited_s is None or start.waited_s is None:
        return CpuWait(worker, end.source, window, None, None)
    ran = None
    if end.ran_s is not None and start.ran_s is not None:
        ran = max(0.0, end.ran_s - start.ran_s)
    return CpuWait(worker, end.source, window, max(0.0, end.waited_s - start.waited_s), ran)


def _pressure_total_s(cgroup: str) -> float | None:
    """``some total`` of the cgroup's ``cpu.pressure``, in seconds."""
    try:
        with open(os.path.join(cgroup, "cpu.pressure")) as f:
            for line in f:
                if line.startswith("some "):
                    fields = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
                    return int(fields["total"]) / 1e6
    except (OSError, KeyError, ValueError):
        return None
    return None


def _usage_s(cgroup: str) -> float | None:
    try:
        with open(os.path.join(cgroup, "cpu.stat")) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        return None
    return None


def _schedstat(pids: set[int]) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting on a run queue) summed over every live thread."""
    ran = waited = 0
    seen = False
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    fields = f.read().split()
            except OSError:
                continue
            if len(fields) >= 2:
                ran += int(fields[0])
                waited += int(fields[1])
                seen = True
    return (ran / 1e9, waited / 1e9) if seen else None
