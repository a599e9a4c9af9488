"""The harness's record of one worker incarnation while it runs.

One record every part of the supervisor reads and writes (starting, the events pipe,
killing, classifying the end), kept apart so that each of those can be a module of its own
without importing the others.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.engine.process import _keeper
from harness.engine.process._boundary import Arm
from harness.engine.process._tree import ProcessTree


@dataclass
class RunningWorker:
    name: str
    pid: int
    started_at: float
    stderr_path: Path
    arms: list[Arm] = field(default_factory=list)
    #: worker -> harness: "paused NAME HIT" lines (read end, in the harness)
    events_fd: int | None = None
    #: harness -> worker: "continue" / "crash" / "raise" (write end, in the harness)
    control_fd: int | None = None
    pending: bytes = b""
    ended: bool = False
    #: every process of this worker (its cgroup, or its descendants)
    tree: ProcessTree | None = None
    #: walk mode: the child subreaper that is this worker's parent (None with a cgroup)
    keeper: _keeper.Keeper | None = None
    #: the reasons of every ``Supervisor.kill`` of this worker (the harness's own record)
    harness_kills: list[str] = field(default_factory=list)
    #: True once the harness released a pause of this worker with ``crash``
    crash_released: bool = False
    #: how the harness stopped this (daemon) worker: "SIGTERM", or "SIGTERM then SIGKILL"
    stopped_by: str | None = None
    #: what it wrote after SIGABRT when it outlived its stop signal's grace (else None)
    stop_dump: str | None = None
    #: behind the wall: the first process's pid inside its PID namespace (its trace's pids
    #: are the namespace's); None outside
    ns_pid: int | None = None

    def close_pipes(self) -> None:
        for fd in (self.events_fd, self.control_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.events_fd = self.control_fd = None
