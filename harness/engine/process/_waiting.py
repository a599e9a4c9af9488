"""Waiting on descriptors and on processes' ends, without a thread or a sleep.

The supervisor waits on workers, and the case's own code on providers and forked jobs, all
the same way: a pidfd or a pipe turning readable. One place for it, so none of them meets
``select``'s 1024-descriptor ceiling or a pid that is gone before its pidfd is opened.
"""

from __future__ import annotations

import os
import select


def pidfd_of(pid: int) -> int:
    """A pidfd of a worker's first process, readable once it has ended. A walled worker is
    its init's child, not the harness's: when the harness killed its cgroup, the init died
    with it and reaped it, so it may be gone outright; then a descriptor that is readable
    already (the worker's wait status comes from its init's pipe: SIGKILL)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        r, w = os.pipe()
        os.close(w)
        return r


def wait_readable(fds: list[int], timeout_s: float | None) -> list[int]:
    """``select`` without its 1024-descriptor ceiling (long campaigns open many files)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
    return [fd for fd, _ in poller.poll(timeout_ms)]
