"""Walk mode without leaks: a keeper process that is the parent, and the subreaper, of a worker.

Without a cgroup, a worker's processes are found by walking ``/proc`` down from its first
process. A process that daemonises (double fork, ``setsid``, its parent gone) drops out of
that walk: the kernel re-parents it to the nearest *child subreaper* above it, by default
init. So in walk mode the harness forks a keeper first, which makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``) and then forks the worker. Every orphan of the worker's tree
lands on the keeper, and "every process of the worker" is "every descendant of the keeper".

The keeper reports the worker's pid, then its wait status, on a pipe (it leaves the worker a
zombie until it is let go, so the pid the harness watches is never reused under it). It ends
when the harness closes the other pipe, as the harness does when it is done with the worker,
or as the kernel does when the harness dies, even by SIGKILL: either way the keeper first
kills whatever is left under it. A record of each live keeper (pid and start time, with the
harness's owner tag) lets ``crash-harness clean`` and the next run kill what a keeper that
could not act (stopped, say) still holds. A keeper SIGKILLed along with its harness leaves
its daemons to init: that one gap stays (a cgroup has none).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import signal
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from harness.engine.process import _tree
from harness.engine.store import _owner

_PR_SET_CHILD_SUBREAPER = 36

#: under the scratch root, plus the user's id: one record per live keeper, named by its pid
RECORDS_DIR = ".crash-harness-keepers"
#: a keeper outlives a Ctrl-C or a stray SIGTERM to its harness's group, to kill what is left
_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Keeper:
    """The harness's side of one keeper: its pid, the worker's, and the two pipe ends."""

    pid: int
    root: int
    report_fd: int
    hold_fd: int
    start: int = 0
    pending: bytes = b""
    status: int | None = None
    record: Path | None = field(default=None, repr=False)
    #: let go without waiting: whoever did that reaps it
    reaped_elsewhere: bool = False

    def wait_status(self) -> int:
        """The worker's wait status (blocks until its first process has ended). A keeper that
        was itself killed took the worker with it (its death signal): that reads as SIGKILL."""
        while self.status is None:
            line = self._line()
            if line is None:
                self.status = signal.SIGKILL
            elif line.startswith(b"status "):
                self.status = int(line.split()[1])
        return self.status

    def release(self, *, wait: bool = True) -> None:
        """Let the keeper go: it kills anything still under it, reaps, and exits. Without
        ``wait`` its end is not waited for (the caller reaps it later)."""
        if self.hold_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.hold_fd)
            self.hold_fd = -1
        if not wait:
            self.reaped_elsewhere = True
        elif not self.reaped_elsewhere:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        if self.report_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.report_fd)
            self.report_fd = -1
        if self.record is not None:
            with contextlib.suppress(OSError):
                self.record.unlink()
            self.record = None

    def _line(self) -> bytes | None:
        while b"\n" not in self.pending:
            try:
                chunk = os.read(self.report_fd, 256)
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line


@functools.cache
def libc() -> ctypes.CDLL:
    """libc, looked up once in the harness: a ``ctypes.CDLL`` made in every keeper cost each
    one 0.2 ms."""
    return ctypes.CDLL(None, use_errno=True)


def spawn(run_worker: Callable[[int], NoReturn], *, close_in_worker: Iterable[int]) -> Keeper:
    """Fork a keeper that forks the worker, which runs ``run_worker(keeper_pid)``.

    Raises ``OSError`` when either fork fails."""
    report_r, report_w = os.pipe()
    hold_r, hold_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (report_r, report_w, hold_r, hold_w):
            os.close(fd)
        raise
    if pid == 0:  # pragma: no cover - the keeper, which never returns
        code = 1
        try:
            os.close(report_r)
            os.close(hold_w)
            _keeper(run_worker, report_w, hold_r, [*close_in_worker, report_w, hold_r])
            code = 0
        finally:
            os._exit(code)
    os.close(report_w)
    os.close(hold_r)
    keeper = Keeper(pid, 0, report_r, hold_w, start=_owner.start_time(pid) or 0)
    line = keeper._line()
    if line is None or not line.startswith(b"pid "):
        keeper.release()
        raise OSError(f"keeper {pid} could not fork the worker")
    keeper.root = int(line.split()[1])
    keeper.record = _record(keeper)
    return keeper


def _keeper(
    run_worker: Callable[[int], NoReturn], report_fd: int, hold_fd: int, worker_closes: list[int]
) -> None:  # pragma: no cover - runs in the keeper
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # a Ctrl-C to the harness's group is the harness's to handle
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _IGNORED}
    if libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return  # no report: the harness raises, and no worker ever ran
    me = os.getpid()
    root = os.fork()
    if root == 0:
        for sig, handler in saved.items():  # the worker starts as if forked by the harness
            signal.signal(sig, handler)
        for fd in worker_closes:
            with contextlib.suppress(OSError):
                os.close(fd)
        run_worker(me)
    with contextlib.suppress(OSError):
        os.setpgid(root, root)
    os.write(report_fd, f"pid {root}\n".encode())  # first: the harness goes on meanwhile
    # hold nothing of the harness's: a pipe or socket kept open here would hide its end. No
    # collection from here on: a harness object's finalizer would close a number reused here.
    gc.disable()
    _close_all_but({report_fd, hold_fd})
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD wakes the poll
    reported = False
    while True:
        if not reported:
            info = os.waitid(os.P_PID, root, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None and info.si_pid == root:
                with contextlib.suppress(OSError):
                    os.write(report_fd, f"status {_raw_status(info)}\n".encode())
                reported = True
        _reap_orphans(me, keep=root)
        with contextlib.suppress(InterruptedError):
            ready = _tree.poll_readable([hold_fd, wake_r], None)
            if wake_r in ready:
                os.read(wake_r, 4096)
            if hold_fd in ready and not os.read(hold_fd, 4096):
                break  # the harness is done with this worker, or is dead
    if me == 1:  # the init of a walled worker's PID namespace: its exit kills the rest
        return
    _tree.kill_descendants(me)  # each killed and awaited (bounded): none can run any more
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:  # no wait on one stuck in the kernel: init reaps
            pass


def _raw_status(info: os.waitid_result) -> int:
    """A ``waitpid``-style status from ``waitid``'s fields."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    if info.si_code == os.CLD_DUMPED:
        return info.si_status | 0x80
    return info.si_status


def _reap_orphans(me: int, *, keep: int) -> None:
    """Reap the keeper's children that have ended, all but the worker's first process (the
    harness still watches its pid)."""
    for pid, parent in _tree.parents().items():
        if parent == me and pid != keep:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _close_all_but(keep: set[int]) -> None:
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


# -- records, for a harness that was killed ---------------------------------------------------


def _records_dir() -> Path:
    from harness.engine.store._scratch import scratch_root

    return Path(scratch_root() or tempfile.gettempdir()) / f"{RECORDS_DIR}-{os.getuid()}"


def _record(keeper: Keeper) -> Path | None:
    """Write who runs this keeper (the harness's owner tag) and the keeper's start time."""
    path = _records_dir() / f"{keeper.pid}"
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.write_text(f"{_owner.me().tag()}\nkeeper pid={keeper.pid} start={keeper.start}\n")
    except OSError:
        return None
    return path


@dataclass(frozen=True)
class Swept:
    """A keeper of a run that is gone, and how many processes were still under it."""

    keeper: int
    killed: int


def sweep_stale() -> list[Swept]:
    """Kill what is left under the keepers of runs that are gone (a keeper notices its
    harness's death and does this itself; this is for one that could not, being stopped,
    or has not got to it yet), and drop their records."""
    swept: list[Swept] = []
    try:
        records = list(_records_dir().iterdir())
    except OSError:
        return swept
    for path in records:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        owner = _owner.parse(lines[0]) if lines else None
        if owner is None or not _owner.is_gone(owner):
            continue
        fields = dict(f.split("=", 1) for f in lines[1].split()[1:]) if len(lines) > 1 else {}
        pid, start = int(fields.get("pid", "0")), int(fields.get("start", "-1"))
        if pid > 0 and _owner.start_time(pid) == start:
            killed = _tree.kill_descendants(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            swept.append(Swept(pid, killed))
        with contextlib.suppress(OSError):
            path.unlink()
    return swept
