"""Whether the machine, not the system, made a worker late: how long its processes waited
for a CPU they were ready to use.

A deadline (a settle deadline, a liveness budget, a quiet window) measures the system only
if the system ran. On a shared CI runner at load 12 on 2 cores a worker can spend most of a
deadline runnable and not running; blaming it for the miss is a false alarm. A really stalled
worker (a stopped event loop, a task that never started, a process blocked or stopped) is
not *waiting for CPU*: it sleeps. So low CPU use is never the signal, only time spent
runnable-and-not-running, which a stall does not accumulate:

- **cgroup mode**: the worker's own cgroup's ``cpu.pressure`` ``some total`` (time during
  which at least one of its tasks was runnable and not running) and ``cpu.stat usage_usec``;
- **walk mode**: ``/proc/PID/task/TID/schedstat`` (time on a CPU, time waiting on a run
  queue) summed over the tree's live threads. A process that already ended takes its figures
  with it, so walk mode can only under-count the wait: it never excuses a stall.

Both count from the worker's spawn (a fresh cgroup per worker, a fresh process); a window is
the difference of two samples (``CpuWatch``). The harness uses them to **credit** a worker
with the time the machine took from it: a deadline of D seconds is over once the worker has
*had* D seconds (wall time less time spent waiting for CPU), or once it is ``STRETCH`` times
D on the wall clock, whichever comes first. Cut short by the stretch, the worker never had
its due: ``starved``, and the verdict is undecided. A live worker that polls on a busy
machine loses a little and gets it back, so it is still judged; a stalled one loses nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from harness.engine.process._tree import ProcessTree

#: how far a deadline may be stretched, on the wall clock, to give back the time a worker
#: spent waiting for CPU; a worker that still has not had its due then was starved
STRETCH = 3.0


@dataclass(frozen=True)
class CpuWait:
    """How long a worker's tree waited for CPU, and ran, in a window that was meant to give
    it ``required_s`` seconds."""

    worker: str
    #: where the figures come from: "cgroup cpu.pressure", "schedstat", or "unmeasured"
    source: str
    #: wall seconds of the window judged
    window_s: float
    #: seconds runnable and not running (None: unmeasured)
    waited_s: float | None
    #: seconds on a CPU (None: unmeasured)
    ran_s: float | None
    #: the deadline the window was for
    required_s: float = 0.0

    @property
    def had_s(self) -> float:
        """The window less the time the machine kept the worker waiting."""
        return max(0.0, self.window_s - (self.waited_s or 0.0))

    @property
    def share(self) -> float | None:
        if self.waited_s is None or self.window_s <= 0:
            return None
        return self.waited_s / self.window_s

    @property
    def over(self) -> bool:
        """Time to decide: the worker has had its due, or the stretch limit is reached."""
        return self.had_s >= self.required_s or self.window_s >= STRETCH * self.required_s

    @property
    def starved(self) -> bool:
        """Measured, and the worker did not have its due: the machine held it back."""
        return self.waited_s is not None and self.had_s < self.required_s

    def more_s(self) -> float:
        """Wall seconds still to wait before deciding: the time owed, within the stretch."""
        owed = self.required_s - self.had_s
        return max(0.0, min(owed, STRETCH * self.required_s - self.window_s))

    def to_json(self) -> dict[str, Any]:
        share = self.share
        return {
            "worker": self.worker,
            "source": self.source,
            "window_s": round(self.window_s, 3),
            "waited_for_cpu_s": None if self.waited_s is None else round(self.waited_s, 3),
            "ran_s": None if self.ran_s is None else round(self.ran_s, 3),
            "wait_share": None if share is None else round(share, 3),
            "had_s": round(self.had_s, 3),
            "required_s": round(self.required_s, 3),
            "stretch": STRETCH,
            "starved": self.starved,
        }

    def describe(self) -> str:
        """One line with the figures, for notes and summaries."""
        if self.waited_s is None:
            return f"{self.worker}: CPU wait unmeasured ({self.source})"
        ran = "" if self.ran_s is None else f", ran {self.ran_s:.2f}s"
        return (
            f"{self.worker} waited {self.waited_s:.2f}s for CPU in a {self.window_s:.2f}s "
            f"window{ran} ({self.source}): it had {self.had_s:.2f}s of the "
            f"{self.required_s:g}s it was due, the deadline stretched up to {STRETCH:g} times"
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

    def since(self, start: CpuSample | None, required_s: float) -> CpuWait:
        """The window from ``start`` (the spawn if None) to now, meant to give ``required_s``."""
        return between(self.worker, start or self.spawn, self.mark(), required_s)


def between(worker: str, start: CpuSample, end: CpuSample, required_s: float = 0.0) -> CpuWait:
    """The figures of the window from ``start`` to ``end`` (a process that ended between
    them takes its share with it in walk mode: the wait is never over-counted)."""
    window = max(0.0, end.at - start.at)
    if end.waited_s is None or start.waited_s is None:
        return CpuWait(worker, end.source, window, None, None, required_s)
    ran = None
    if end.ran_s is not None and start.ran_s is not None:
        ran = max(0.0, end.ran_s - start.ran_s)
    waited = max(0.0, end.waited_s - start.waited_s)
    return CpuWait(worker, end.source, window, waited, ran, required_s)


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
