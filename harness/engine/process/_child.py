"""The child side of a fork: what a forked process does to stop being the harness and
become a worker, before it runs the worker's code.

Everything here runs in a copy of the harness (its memory, its descriptors, its secrets),
so the order matters and is one list to read: leave the harness's group and pipes, join
the cgroup, die with the harness, forget what only the harness may know, then take the
worker's own output files and arms. Only the copy ever runs this; the harness looks up
what a child needs (``prctl``) before it forks, so no worker pays for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from fake_providers._client import forget_admin_tokens
from harness.engine.process import _boundary, _tree
from harness.engine.process._boundary import Arm
from harness.engine.process._tree import ProcessTree
from harness.engine.store import _secrets

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4

#: the harness's ends of its guards' and keepers' pipes, closed in every forked worker (which
#: must not keep a guard or a keeper waiting)
HARNESS_PIPE_ENDS: set[int] = set()


@functools.cache
def prctl() -> Any:
    """libc's ``prctl``, looked up once in the harness so a worker inherits it ready: a
    ``ctypes.CDLL`` made in every child cost each one 0.2 ms and ~40 copy-on-write faults."""
    return ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when ``parent_pid`` (its parent) dies, and
    exit now if it already has."""
    prctl()(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker's first process needs from the harness, fixed before the fork."""

    target: Callable[[], None]
    name: str
    arms: list[Arm]
    trace_path: Path
    stdout_path: Path
    stderr_path: Path
    #: the worker's ends of its two pipes: events (it writes), control (it reads)
    events_fd: int
    control_fd: int
    counter_dir: Path
    hooks: bool = False


def run(
    spec: WorkerSpec,
    *,
    parent: int,
    cgroup: str | None,
    keeper: int | None,
    born_inside: bool = False,
) -> NoReturn:  # pragma: no cover - child side
    """Become the worker ``spec`` describes and run its target; never returns (exit 70 if
    the target raised, its traceback on the worker's stderr)."""
    code = 0
    # No gc.freeze() here, though a full collection in a worker walks (and so copies) the
    # harness's whole heap (bench_fork_size.py: 20 ms at 75 MB, 4.6 ms frozen): workers
    # of an explore almost never run one, and frozen objects leave gc.get_objects(), which
    # a system under test may use (tests/_systems.py's hostile worker finds the harness's
    # admin client that way). A worker sees the collector as a plain fork leaves it.
    try:
        cgroup = _leave_the_harness(parent, cgroup, born_inside=born_inside)
        _write_output_to(spec.stdout_path, spec.stderr_path)
        _boundary.configure(
            trace_path=str(spec.trace_path),
            worker=spec.name,
            arms=spec.arms,
            events_fd=spec.events_fd,
            control_fd=spec.control_fd,
            tree=ProcessTree(os.getpid(), cgroup, keeper),
            counter_dir=str(spec.counter_dir),
        )
        if spec.hooks:  # this process, what it forks, and every Python program it execs
            from harness.engine.process import _hooks

            _hooks.install_in_worker()
        spec.target()
    except BaseException:
        traceback.print_exc()
        code = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _leave_the_harness(
    parent: int, cgroup: str | None, *, born_inside: bool
) -> str | None:  # pragma: no cover - child side
    """Its own group and cgroup, none of the harness's pipes, secrets or signal handlers,
    and death with the harness. The cgroup it is in (None if it could not join it)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    for fd in HARNESS_PIPE_ENDS:  # a worker, or its pool, must not keep a guard waiting
        with contextlib.suppress(OSError):
            os.close(fd)
    if cgroup is not None and not born_inside and not _tree.join_cgroup(cgroup, os.getpid()):
        cgroup = None
    die_with_parent(parent)
    _secrets.forget_provider_secrets()  # a provider's admin token is not the worker's
    forget_admin_tokens()  # nor the harness's admin clients it inherited
    prctl()(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own (the harness's is 0)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    return cgroup


def _write_output_to(stdout_path: Path, stderr_path: Path) -> None:  # pragma: no cover
    """Descriptors 1 and 2, and ``sys.stdout``/``sys.stderr``, on the worker's own files;
    a stack dump of every thread on stderr if it is sent SIGABRT (a hang)."""
    out = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    # The parent's sys.stdout/err may be capture objects (pytest); rebind to the files.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    # Never touch the parent's faulthandler watchdog: its thread does not exist here.
    faulthandler.enable(file=2, all_threads=True)
