"""Forking a worker's first process: behind the wall, under a keeper, or into its cgroup.

Which way a worker is born decides how its processes are found and killed later, and the
ways are tried in one order: behind the wall (its own PID and mount namespaces, with an
init born in its cgroup) where that is wanted and can be built; a keeper above it when
there are no cgroups (walk mode); else born straight into its cgroup, or forked and moved
there where the kernel cannot do that. One function makes that choice; the supervisor only
records what came of it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol

from harness.engine.process import _born, _keeper, _wall
from harness.engine.process._child import HARNESS_PIPE_ENDS, prctl
from harness.engine.store import _scratch, _secrets


class RunWorker(Protocol):
    """The child side of a start: becomes the worker, never returns. ``parent`` is the
    process it dies with, ``keeper`` the process above it that holds its orphans."""

    def __call__(
        self, parent: int, keeper: int | None, *, born_inside: bool = ..., walled: bool = ...
    ) -> NoReturn: ...


@dataclass(frozen=True)
class Forked:
    """What a fork made, as the harness sees it (``pid`` 0: this is the child)."""

    pid: int
    keeper: _keeper.Keeper | None = None
    #: behind the wall: the worker's pid inside its namespace
    ns_pid: int | None = None
    #: in its cgroup from its first instruction (``harness.engine.process._born``)
    born_inside: bool = False
    #: how it reached its cgroup, for ``Supervisor.births`` (None: it has none to reach)
    birth: str | None = None


def ready_to_fork() -> bool:
    """Make the harness fit to copy (output flushed, what children look up looked up
    already); whether this worker goes behind the wall."""
    sys.stdout.flush()
    sys.stderr.flush()
    prctl()  # here, not in each child
    _keeper.libc()  # and in each keeper
    _secrets.ready_to_forget()
    walled = _wall.wanted()
    if walled:
        _wall.prepare()
    return walled


def fork_worker(
    run_worker: RunWorker, *, cgroup: str | None, walled: bool, workdir: Path, logdir: Path
) -> Forked:
    """Fork the worker's first process the first way that works here (the module docstring
    says the order). ``OSError`` if none could."""
    got = None
    if walled:  # an init in the worker's own namespaces, born in its cgroup
        view = _wall.view_for(scratch=_scratch_root(), workdir=workdir, own=logdir)
        got = _wall.spawn(lambda k: run_worker(k, k, walled=True), cgroup=cgroup, view=view)
    if got is not None:
        keeper, ns_pid = got
        HARNESS_PIPE_ENDS.update((keeper.hold_fd, keeper.report_fd))
        birth = None if cgroup is None else "born in its cgroup"
        return Forked(keeper.root, keeper, ns_pid, birth=birth)
    if cgroup is None:  # walk mode: a keeper above the worker holds its orphans
        keeper = _keeper.spawn(lambda k: run_worker(k, k), close_in_worker=())
        HARNESS_PIPE_ENDS.update((keeper.hold_fd, keeper.report_fd))
        return Forked(keeper.root, keeper)
    # born in its cgroup where that can be done, else forked and moved there
    born = _born.fork_into(cgroup)
    pid = os.fork() if born is None else born
    born_inside = born is not None
    birth = "born in its cgroup" if born_inside else "moved to its cgroup"
    return Forked(pid, born_inside=born_inside, birth=birth)


def _scratch_root() -> str | None:
    """The scratch root other runs' work dirs are in (the wall hides it): an unusable
    ``CRASH_HARNESS_TMPDIR`` was refused long before a worker starts."""
    try:
        return _scratch.scratch_root()
    except Exception:
        return None
