"""Processes a case cannot go on without (its provider), watched by pidfd in every wait.

A worker whose provider died does not end: it retries into a closed port, often at full
speed, until its deadline (a minute by default) or for ever (a daemon). So the supervisor
adds each lifeline's pidfd to every wait it makes for a worker, and the moment one turns
readable (the process ended, however) it raises ``LifelineCut`` instead of waiting on: the
case in flight is stopped and called inconclusive within a poll, never after a deadline.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from harness.errors import SupervisorError


class LifelineCut(SupervisorError):
    """A watched process (``name``, ``pid``) ended while the harness waited on a worker."""

    def __init__(self, name: str, pid: int) -> None:
        super().__init__(f"{name} (pid {pid}) ended")
        self.name = name
        self.pid = pid


class Lifelines:
    """The pidfds of the processes a case needs alive; each one fires once, then is gone."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[str, int]] = {}  # pidfd -> (name, pid)
        self._ever: set[int] = set()

    def watch(self, name: str, pid: int) -> None:
        """Watch ``pid`` (say ``name`` when it ends). A pid already gone fires at once."""
        self.forget(pid)
        self._ever.add(pid)
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # ended (and reaped) before it could be watched
            fd = os.open(os.devnull, os.O_RDONLY)  # readable at once: fires on the next wait
        self._watched[fd] = (name, pid)

    def forget(self, pid: int) -> None:
        """Stop watching ``pid`` (a process stopped on purpose)."""
        for fd, (_, watched) in list(self._watched.items()):
            if watched == pid:
                del self._watched[fd]
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def pids(self) -> set[int]:
        """Every pid ever watched (the providers, a dead one until its status is read):
        processes of the harness, never a worker's leftover."""
        return set(self._ever)

    @property
    def fds(self) -> list[int]:
        return list(self._watched)

    def check(self, ready: Iterable[int]) -> None:
        """Raise ``LifelineCut`` for the first watched pidfd in ``ready`` (and forget it, so
        the cleanup that follows can wait on workers again)."""
        for fd in ready:
            if fd in self._watched:
                name, pid = self._watched[fd]
                self.forget(pid)
                raise LifelineCut(name, pid)

    def close(self) -> None:
        for fd in list(self._watched):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._watched.clear()
