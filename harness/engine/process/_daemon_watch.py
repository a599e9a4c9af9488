"""When a daemon worker has settled, missed its deadline, or is still starting: decided from
what the harness reads, never from how long ago it forked the worker.

A Celery, Dramatiq or taskiq worker can take seconds to import before it does anything, and
longer on a busy CI runner. Counting the quiet window (``Settle.quiet_s``) from the spawn
stopped such a worker before it had enqueued anything, and its baseline failed
``no_silent_loss``. So the quiet window and the settle deadline count from the worker's
**first sign of life**:

- a trace line of its own (a boundary hit, a note),
- a request at the provider since it was spawned, or
- a probe answer other than the first one taken while it ran.

A worker that shows none of these is given a **start-up allowance**: the case's worker
deadline for the case's first worker; for a later one, twice the slowest start an earlier
worker of the case showed (at least ``quiet_s``): a restarted worker with nothing left to do
shows no sign of life at all, and must not hold the case for a minute. When the allowance
passes the worker counts as started (the trace says so).

Every one of these spans (the allowance, the quiet window, the deadline) is credited with
the time the machine kept the worker waiting for CPU (``harness.engine.process._cpu_wait``): it is
over once
the worker has *had* it, or at ``STRETCH`` times it on the wall clock. A deadline cut short
that way is one the machine missed (``Deadline.cpu.starved``), decided as such.

What counts as **something happening** (and starts the quiet window again) is a request at
the provider, or a trace line of any kind except an idle poll's: a commit the hooks saw
change no row (``"changed": false``: a Huey or RQ scheduler's once-a-second look at an empty
queue, a poller's ``BEGIN; SELECT; COMMIT``). Counted, an idle loop never lets a daemon go
quiet: the case ran to the settle deadline and read ``liveness`` failed with the real loss
left undecided. An idle poll is still a sign of life, and still a point that can be crashed.

Evidence at the deadline is read **again after the deadline**: a deadline met just as the
work finishes, every delivery accepted, is a settled system, not a liveness failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.engine.process._cpu_wait import CpuSample, CpuWait, CpuWatch
from harness.engine.process.settle import Settle


@dataclass(frozen=True)
class SpawnMarks:
    """Where a daemon worker's own evidence starts: the trace's size and the provider's
    request count just before it was spawned, and when (monotonic)."""

    trace_offset: int
    requests: int
    at: float


@dataclass(frozen=True)
class Reading:
    """One look at a running daemon, read in this order: probe, provider, trace; ``at`` is
    the monotonic time once all were read."""

    at: float
    probe_done: bool
    probe_output: str
    #: every intended delivery accepted by the provider (by its own log)
    delivered: bool
    #: trace lines written by this worker since its spawn
    own_lines: int
    #: requests the provider logged since this worker was spawned
    requests: int
    #: trace lines since this worker's spawn that are something happening: every line but
    #: an idle poll's (a commit that changed no row, ``"changed": false``)
    busy_lines: int


@dataclass(frozen=True)
class Settled:
    by: str
    reading: Reading


@dataclass(frozen=True)
class Deadline:
    reading: Reading
    #: the deadline's window: how long the worker waited for CPU in it, what it had
    cpu: CpuWait
    #: True when the worker never showed a sign of life (the start-up was cut short)
    never_started: bool = False


class DaemonWatch:
    """The clock of one daemon incarnation; ``poll`` returns ``Settled``, ``Deadline`` or
    None (keep waiting)."""

    def __init__(
        self,
        settle: Settle,
        *,
        spawned_at: float,
        startup_s: float,
        cpu: CpuWatch,
    ) -> None:
        self.settle = settle
        self.spawned_at = spawned_at
        self.startup_s = startup_s
        self.cpu = cpu
        #: when the worker first showed a sign of life (monotonic), and which
        self.alive_at: float | None = None
        self.alive_by: str | None = None
        self._life: CpuSample | None = None
        self._first_probe: str | None = None
        self._quiet: CpuSample | None = None
        self._activity: tuple[int, int] | None = None
        self.rounds = 0

    @property
    def start_s(self) -> float | None:
        """Seconds from spawn to the first sign of life (None: none yet)."""
        return None if self.alive_at is None else self.alive_at - self.spawned_at

    def observe(self, r: Reading) -> None:
        """Take in one reading: a first sign of life, or something happening."""
        if self._first_probe is None:
            self._first_probe = r.probe_output
        activity = (r.busy_lines, r.requests)
        if self.alive_at is None:
            why = None
            if r.own_lines:
                why = "its first trace line (a boundary hit)"
            elif r.requests:
                why = "its first provider request"
            elif r.probe_output != self._first_probe:
                why = "the probe's answer changed"
            if why is not None:
                self._alive(r.at, why, activity)
            return
        if activity != self._activity:
            self._activity, self._quiet = activity, self.cpu.mark()

    def _alive(self, at: float, why: str, activity: tuple[int, int]) -> None:
        self.alive_at, self.alive_by = at, why
        self._life = self._quiet = self.cpu.mark()
        self._activity = activity

    def settled_by(self, r: Reading) -> str | None:
        """Why the system has settled on this reading, or None."""
        if not r.probe_done:
            return None
        if r.delivered:
            return "the provider accepted every intended delivery"
        if self._quiet is not None and self.cpu.since(self._quiet, self.settle.quiet_s).over:
            return f"nothing happened for {self.settle.quiet_s:g}s"
        return None

    def poll(self, read: Callable[[], Reading]) -> Settled | Deadline | None:
        """Read once and decide; at the deadline, read again and decide on that."""
        r = read()
        self.rounds += 1
        self.observe(r)
        if self.alive_at is None:
            start = self.cpu.since(None, self.startup_s)
            if start.over and start.starved:  # held back by the machine to the end
                return Deadline(r, start, never_started=True)
            if start.over:
                self._alive(
                    r.at,
                    f"no sign of life in {r.at - self.spawned_at:.3g}s: counted as started",
                    (r.busy_lines, r.requests),
                )
        by = self.settled_by(r)
        if by is not None:
            return Settled(by, r)
        if self._life is None:
            return None
        window = self.cpu.since(self._life, self.settle.deadline_s)
        if not window.over:
            return None
        # The deadline passed: decide on evidence read after it, not on the provider's log
        # as it was before the probe last answered (the work may have finished in between).
        fresh = read()
        self.observe(fresh)
        by = self.settled_by(fresh)
        if by is not None:
            return Settled(f"{by}, read again at the deadline", fresh)
        return Deadline(fresh, window)


def lines_by(path: Path, offset: int, worker: str) -> tuple[int, float | None]:
    """How many trace lines ``worker`` itself wrote after ``offset`` (not the supervisor's
    spawn and exit lines about it), and the wall time of the first; a torn last line is
    not counted."""
    since = trace_since(path, offset, worker)
    return since.own_lines, since.first_t


@dataclass(frozen=True)
class TraceSince:
    """The trace after a worker's spawn offset, as a daemon watch reads it."""

    #: lines ``worker`` itself wrote (not the supervisor's spawn and exit lines about it)
    own_lines: int
    #: the wall time of the first of them
    first_t: float | None
    #: lines of anyone's that are something happening: all but idle polls
    busy_lines: int


def is_idle(ev: dict[str, object]) -> bool:
    """An idle poll's line: a commit (a hit or an unnamed one) the hooks saw change no row."""
    detail = ev.get("detail")
    return isinstance(detail, dict) and detail.get("changed") is False


def trace_since(path: Path, offset: int, worker: str) -> TraceSince:
    """Read the trace after ``offset`` once for a daemon watch; a torn last line is not
    counted."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            raw = f.read()
    except FileNotFoundError:
        return TraceSince(0, None, 0)
    count, first, busy = 0, None, 0
    for line in raw.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        if not is_idle(ev):
            busy += 1
        if ev.get("worker") != worker or ev.get("event") in ("spawn", "exit"):
            continue
        count += 1
        if first is None and isinstance(ev.get("t"), int | float):
            first = float(ev["t"])
    return TraceSince(count, first, busy)
