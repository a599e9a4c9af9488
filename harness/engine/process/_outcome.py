"""How one worker incarnation ended, as the case, the verdict and the reports read it.

Apart from the supervisor that makes them because far more code reads an outcome than ends
a worker (results, faults, the search's landings, reports): they need the record, not the
machinery that forks and kills.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harness.engine.process import _leftovers


class OutcomeKind(StrEnum):
    """How one worker incarnation ended."""

    COMPLETED = "completed"
    CRASHED_AS_PLANNED = "crashed_as_planned"
    KILLED_UNPLANNED = "killed_unplanned"
    DIED = "died"
    HUNG = "hung"
    #: a daemon worker the harness stopped once the system had settled (or the settle
    #: deadline passed): by its documented stop signal, or by SIGKILL when it ignored that;
    #: also a worker killed because its case's provider died
    #: (``harness.engine.case._provider_watch``)
    STOPPED = "stopped"
    #: a worker that exited with a code its scenario calls normal after one of its processes
    #: was killed as planned (``[worker] exits_after_crash``): restarted, no anomaly
    EXITED_AFTER_CRASH = "exited_after_crash"


@dataclass
class WorkerOutcome:
    worker: str
    pid: int
    kind: OutcomeKind
    exit_code: int | None
    signal: str | None
    boundary: str | None
    hit: int | None
    started_at: float
    ended_at: float
    stderr_tail: str = ""
    stack_dump: str | None = None
    #: processes of the worker still alive when its first process ended (killed then)
    stragglers: int = 0
    #: each of them named: pid, command line, what tied it to the worker
    #: (``harness.engine.process._leftovers``), escaped ones (out of its cgroup) included
    left: list[_leftovers.Leftover] = field(default_factory=list)
    #: why the death was classified as it was, when that is not plain from the kind (an
    #: unplanned SIGKILL whose crash line matched no arm)
    note: str | None = None
    #: behind the wall (``harness.engine.process._wall``): the first process's pid in its own PID
    #: namespace, as its trace lines name it (None: ``pid`` is what they say)
    ns_pid: int | None = None

    @property
    def trace_pid(self) -> int:
        """The pid the worker's first process writes in its trace lines (behind the wall,
        its namespace's: a number that may be another process's on the host)."""
        return self.pid if self.ns_pid is None else self.ns_pid

    @property
    def ended_normally(self) -> bool:
        """It finished (a worker that ends when its work is done), or the harness stopped it
        (a daemon): either way, any armed hit it never reached is not coming."""
        return self.kind in (OutcomeKind.COMPLETED, OutcomeKind.STOPPED)

    @property
    def outcome_is_anomaly(self) -> bool:
        return self.kind in (OutcomeKind.DIED, OutcomeKind.KILLED_UNPLANNED, OutcomeKind.HUNG)

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "pid": self.pid,
            "outcome": self.kind.value,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "boundary": self.boundary,
            "hit": self.hit,
            "duration_s": round(self.ended_at - self.started_at, 4),
            "stderr_tail": self.stderr_tail,
            "stack_dump": self.stack_dump,
            "stragglers": self.stragglers,
            **({"left": [p.to_json() for p in self.left]} if self.left else {}),
            "note": self.note,
        }
