"""A worker is a process tree; find all of it, so a "whole worker" crash leaves nothing alive.

Task-queue workers run their work in pool children, in a forked work-horse that moves itself
into a new session (RQ calls ``setsid``), or in threads. A process group, or even a session,
does not hold such a tree together, so the harness finds a worker's processes another way:

- a **cgroup v2** per worker (when this process may create one: root, or a delegated
  subtree). Membership is inherited by every fork and cannot be left by ``setsid``;
  ``cgroup.kill`` kills every member at once, even one that is forking at that instant.
- otherwise a **descendant walk** over ``/proc``: every member is stopped (SIGSTOP) until
  no new one appears, then all are killed. The walk starts from the worker's *keeper*
  (``harness.engine.process._keeper``), a child subreaper the harness forks first and the worker's
  parent:
  a process that daemonises (double fork, ``setsid``, its parent gone) is re-parented to the
  keeper, so it stays in the walk. ``crash-harness`` says which mode it used.

This module runs inside workers too (a boundary armed with the ``worker`` scope kills its own
tree), so it imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

_PROC = "/proc"


@dataclass(frozen=True)
class ProcessTree:
    """The processes of one worker: its first process and, when there is one, its cgroup or
    its keeper."""

    root: int
    #: directory of the worker's own cgroup v2 (None: the descendant walk is used)
    cgroup: str | None = None
    #: walk mode: the child subreaper above the worker (its descendants are the worker's)
    keeper: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"root": self.root, "cgroup": self.cgroup, "keeper": self.keeper}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProcessTree:
        root = data.get("root")
        cgroup = data.get("cgroup")
        keeper = data.get("keeper")
        if not isinstance(root, int):
            raise TypeError(f"process tree root must be a pid, got {root!r}")
        return cls(
            root,
            cgroup if isinstance(cgroup, str) else None,
            keeper if isinstance(keeper, int) else None,
        )

    def members(self) -> set[int]:
        """Every live process of the worker (the root included while it lives)."""
        if self.cgroup is not None:  # the wall's init (a keeper in the cgroup) is not one
            return _cgroup_members(self.cgroup) - {self.keeper}
        if self.keeper is not None:
            return _descendants(self.keeper) - {self.keeper}
        return _descendants(self.root)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every member (SIGSTOP / SIGCONT to pause a whole worker)."""
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every member, this process included if it is one (then this never returns)."""
        me = os.getpid()
        me_inside = me in self.members()
        if self.cgroup is not None:
            try:
                with open(os.path.join(self.cgroup, "cgroup.kill"), "w") as f:
                    f.write("1")
                return
            except OSError:
                pass  # an old kernel without cgroup.kill: stop and kill one by one
        stopped = _stop_all(self.members, me)
        # The root last, once every other member has exited: the supervisor is waiting on the
        # root, and once it is reaped a walk can no longer find the root's orphans.
        others = stopped - {self.root}
        _kill_and_await(others)
        if self.root in stopped:
            if me_inside:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self.root, signal.SIGKILL)
            else:
                _kill_and_await({self.root})
        if me_inside:
            os.kill(me, signal.SIGKILL)

    def wait_empty(self, timeout_s: float) -> bool:
        """Wait until no member can run any more (after a kill, or for orphans at work to
        finish): the cgroup empty, or every descendant of the keeper ended."""
        if self.cgroup is None:
            if self.keeper is None:
                return not self.members()
            return _await_ended(self.members, timeout_s)
        deadline = time.monotonic() + timeout_s
        while self.members():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # cgroup.events raises POLLPRI when "populated" changes: wait on it, not a sleep
            try:
                fd = os.open(os.path.join(self.cgroup, "cgroup.events"), os.O_RDONLY)
            except OSError:
                return not self.members()
            try:
                os.read(fd, 256)
                poller = select.poll()
                poller.register(fd, select.POLLPRI | select.POLLERR)
                if self.members():
                    poller.poll(int(min(left, 0.05) * 1000))
            finally:
                os.close(fd)
        return True


def _stop_all(members: Callable[[], set[int]], me: int) -> set[int]:
    """SIGSTOP every member but ``me`` until no new one appears (a stopped process cannot
    fork); returns the stopped ones. A stop takes effect when its process next leaves the
    kernel: one in the middle of ``fork()`` finishes it first, so the walk is repeated only
    once every process signalled is seen stopped (its child, if any, is then listed)."""
    stopped: set[int] = set()
    while True:
        fresh = members() - stopped - {me}
        if not fresh:
            return stopped
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        _until_stopped(fresh)
        stopped |= fresh


def _until_stopped(pids: set[int], timeout_s: float = 1.0) -> None:
    """Wait (bounded) until each of ``pids`` is stopped or gone: the kernel says so only in
    /proc, with nothing to wait on, so it is read again every half millisecond."""
    deadline = time.monotonic() + timeout_s
    waiting = set(pids)
    while waiting and time.monotonic() < deadline:
        waiting = {pid for pid in waiting if _state(pid) not in (b"T", b"t", b"Z", b"X", None)}
        if waiting:
            time.sleep(0.0005)


def _state(pid: int) -> bytes | None:
    """A process's state letter (``T`` stopped, ``Z`` zombie, ...); None once it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat after the command name (state first); None once the process is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def kill_descendants(ancestor: int) -> int:
    """SIGKILL every descendant of ``ancestor`` (not itself) and wait for them to end; returns
    how many could still run (stragglers, not processes already on their way out)."""

    def below() -> set[int]:
        return _descendants(ancestor) - {ancestor}

    running = {pid for pid in below() if not dying(pid)}
    _kill_and_await(_stop_all(below, os.getpid()))
    return len(running)


def _await_ended(members: Callable[[], set[int]], timeout_s: float) -> bool:
    """Wait until every process ``members()`` names can no longer run; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        live = {pid for pid in members() if not dying(pid)}
        if not live:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        handles = []
        for pid in live:
            with contextlib.suppress(OSError):
                handles.append(os.pidfd_open(pid))
        try:
            if handles:  # woken by any end; a new member is seen on the next round
                poll_readable(handles, min(left, 1.0))
        finally:
            for fd in handles:
                os.close(fd)


def poll_readable(fds: list[int], timeout_s: float | None) -> list[int]:
    """The descriptors of ``fds`` that are readable (or hung up) within ``timeout_s``."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
    return [fd for fd, _ in poller.poll(timeout_ms)]


def dying(pid: int) -> bool:
    """Whether ``pid`` is gone or on its way out: a zombie, exiting, or with SIGKILL pending
    (a tree that was just killed is not a set of stragglers)."""
    fields = _stat_fields(pid)
    try:
        with open(f"{_PROC}/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return True
    if not fields:
        return True
    if fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_EXITING:
        return True
    kill_bit = 1 << (signal.SIGKILL - 1)
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & kill_bit:
            return True
    return False


#: task flag: the process is in exit()
_PF_EXITING = 0x4


def _kill_and_await(pids: set[int], timeout_s: float = 5.0) -> None:
    """SIGKILL ``pids`` and return once each has exited (a zombie counts: it runs no more)."""
    handles = []
    for pid in pids:
        with contextlib.suppress(OSError):
            handles.append(os.pidfd_open(pid))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    try:
        _await_exits(handles, timeout_s=timeout_s)
    finally:
        for fd in handles:
            os.close(fd)


def _await_exits(pidfds: list[int], *, timeout_s: float) -> None:
    """A pidfd becomes readable when its process exits (child or not)."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pidfds)
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        poller = select.poll()
        for fd in waiting:
            poller.register(fd, select.POLLIN)
        done = {fd for fd, _ in poller.poll(int(left * 1000))}
        waiting = [fd for fd in waiting if fd not in done]


# -- cgroups ---------------------------------------------------------------------------------


def cgroup2_base() -> str | None:
    """A directory under which this process may create cgroups, or None.

    The cgroup2 mount plus this process's own cgroup path, if it is writable."""
    found = _cgroup2_mount()
    mount = found[0] if found is not None else None
    try:
        with open(f"{_PROC}/self/cgroup") as f:
            own = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or own is None:
        return None
    base = os.path.join(mount, own.lstrip("/"))
    if not os.access(base, os.W_OK) or not os.path.exists(os.path.join(base, "cgroup.procs")):
        return None
    return base


def favours_dynamic_moves() -> bool:
    """Whether the cgroup2 mount has ``favordynmods``: without it, moving a process into a
    cgroup waits for an RCU grace period whenever none was moved in the last few ms (12-17 ms
    measured on one 2-core machine), which is most of a worker's start-up cost here; with it,
    about 0.3 ms. Benchmarks print it, since it changes their figures."""
    found = _cgroup2_mount()
    return found is not None and "favordynmods" in found[1]


def _cgroup2_mount() -> tuple[str, list[str]] | None:
    """Where the cgroup2 hierarchy is mounted, and its mount options; None without one."""
    try:
        with open(f"{_PROC}/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 3 and fields[2] == "cgroup2":
                    return fields[1], fields[3].split(",")
    except OSError:
        pass
    return None


def make_cgroup(parent: str, name: str) -> str | None:
    """Create ``parent/name`` (None if the kernel refuses)."""
    path = os.path.join(parent, name)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    if not os.path.exists(os.path.join(path, "cgroup.procs")):
        return None
    return path


def join_cgroup(path: str, pid: int) -> bool:
    """Move ``pid`` into the cgroup at ``path``."""
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    except OSError:
        return False
    return True


def remove_cgroup(path: str) -> None:
    """Remove an empty cgroup (a cgroup with members stays; the caller kills them first)."""
    with contextlib.suppress(OSError):
        os.rmdir(path)


def sweep_stale(base: str, prefix: str) -> list[str]:
    """Kill and remove cgroups ``base/PREFIX<pid>`` left by a harness that is gone (a SIGKILLed
    harness cannot clean up; its workers' forked children would otherwise live on)."""
    swept: list[str] = []
    try:
        entries = os.listdir(base)
    except OSError:
        return swept
    for entry in entries:
        owner = entry[len(prefix) :]
        if not entry.startswith(prefix) or not owner.isdigit():
            continue
        if os.path.exists(f"{_PROC}/{owner}"):
            continue
        parent = os.path.join(base, entry)
        for child in _subdirs(parent):
            tree = ProcessTree(0, child)
            tree.kill()
            tree.wait_empty(1.0)  # a member whose parent is alive stays until reaped
            remove_cgroup(child)
        remove_cgroup(parent)
        swept.append(parent)
    return swept


def _subdirs(path: str) -> list[str]:
    try:
        return [e.path for e in os.scandir(path) if e.is_dir()]
    except OSError:
        return []


def _cgroup_members(path: str) -> set[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return {int(line) for line in f if line.strip()}
    except OSError:
        return set()


# -- the descendant walk ---------------------------------------------------------------------


def parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir(_PROC):
        if not entry.isdigit():
            continue
        try:
            with open(f"{_PROC}/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields follow the last ')'
        rest = stat[stat.rfind(b")") + 2 :].split()
        if len(rest) > 1:  # zombies included: their children are still the worker's
            parents[int(entry)] = int(rest[1])
    return parents


def _descendants(root: int) -> set[int]:
    of = parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in of.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [root] if root in of else []
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found
