"""Fork a worker straight into its cgroup, so it never has to move there.

Moving a process into a cgroup (writing ``cgroup.procs``) takes the kernel's
``cgroup_threadgroup_rwsem`` for writing, which waits for an RCU grace period whenever no
process was moved in the last few milliseconds: 10-17 ms per worker measured on a 2-core
machine whose cgroup2 is mounted as the distribution mounts it (no ``favordynmods``). That
wait was most of a crash-restart cycle's cost. ``clone3`` with ``CLONE_INTO_CGROUP`` (Linux
5.7) creates the child inside the cgroup under the read side of that lock: no grace period,
and no moment at which the child runs outside its cgroup, so a ``cgroup.kill`` can never miss
it or anything it forks.

Python has no wrapper for ``clone3``, so this calls the raw syscall between CPython's own fork
hooks (``PyOS_BeforeFork`` / ``PyOS_AfterFork_*``, the same calls ``os.fork`` makes, so
``os.register_at_fork`` handlers, the ``random`` reseed and ``threading``'s clean-up all run).
What the raw syscall skips is the C library's own fork bookkeeping (``pthread_atfork``
handlers, malloc's fork locks), which only protects against *other threads* holding a lock
at the instant of the fork. So this is used only while the calling process has one thread,
and ``fork_into`` returns None otherwise; the caller then forks and joins as before. It also
returns None on a kernel or a seccomp policy that refuses ``clone3`` (``ENOSYS``, ``EPERM``),
once, and remembers it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import signal

_SYS_CLONE3 = 435  # the same number on every architecture (the unified syscall table)
_CLONE_INTO_CGROUP = 0x200000000
_CLONE_PARENT = 0x00008000


class _CloneArgs(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
            "set_tid",
            "set_tid_size",
            "cgroup",
        )
    ]


class NamespacesRefused(OSError):
    """The kernel (or a policy) refused the new namespaces asked of ``fork_into``."""


#: True once the kernel refused clone3 here (never tried again)
_refused = False


@functools.cache
def _syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    # PyDLL: the GIL stays held across the call, as os.fork holds it; a CDLL call would
    # release it, and the child would wake with the GIL owned by a thread it does not have.
    try:
        fn = ctypes.PyDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


def single_threaded() -> bool:
    """Whether this process has exactly one thread (C threads included)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1]) == 1
    except (OSError, ValueError):
        pass
    return False


def fork_into(cgroup_dir: str | None, *, namespaces: int = 0) -> int | None:
    """Fork this process with the child born in ``cgroup_dir`` (None: in this process's
    cgroup) and, with ``namespaces`` (``CLONE_NEW*`` flags), in new namespaces: like
    ``os.fork`` (the pid in the parent, 0 in the child), or None when that cannot be done
    safely here (then nothing was forked). Raises ``OSError`` for a failure that a plain fork
    would meet too (``EAGAIN``, ``ENOMEM``). A refusal of the namespaces alone (``EPERM``,
    ``EINVAL``) is raised as ``NamespacesRefused``, and does not stop later calls without
    them."""
    global _refused
    if _refused or not single_threaded():
        return None
    syscall = _syscall()
    if syscall is None:
        _refused = True
        return None
    dirfd = -1
    if cgroup_dir is not None:
        try:
            dirfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
    flags = namespaces | (_CLONE_INTO_CGROUP if dirfd >= 0 else 0)
    # with CLONE_PARENT the child takes its parent's exit signal: clone3 wants none given
    exit_signal = 0 if flags & _CLONE_PARENT else int(signal.SIGCHLD)
    args = _CloneArgs(flags=flags, exit_signal=exit_signal, cgroup=max(dirfd, 0))
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = int(syscall(_SYS_CLONE3, ctypes.byref(args), ctypes.sizeof(args)))
    err = ctypes.get_errno() if pid < 0 else 0
    if pid == 0:
        api.PyOS_AfterFork_Child()
    else:
        api.PyOS_AfterFork_Parent()
    if dirfd >= 0:
        os.close(dirfd)
    if pid >= 0:
        return pid
    if namespaces and err in (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EUSERS):
        raise NamespacesRefused(err, os.strerror(err))
    if err in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG, errno.EOPNOTSUPP):
        # no clone3 here, no CLONE_INTO_CGROUP, or a policy against it: the migrating fork
        # still works, so fall back for good
        _refused = True
        return None
    if err in (errno.EBUSY, errno.EACCES, errno.ENOENT):
        return None  # this cgroup cannot take it (a domain rule, removed): fall back
    raise OSError(err, os.strerror(err))
