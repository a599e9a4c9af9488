"""Processes a case cannot go on without (its provider), watched by pidfd in every wait.

A worker whose provider died does not end: it retries into a closed port, often at full
speed, until its deadline (a minute by default) or for ever (a daemon). So the supervisor
adds each lifeline's pidfd to every wait it makes for a worker, and the moment one turns
readable (the process ended, however) it raises ``LifelineCut`` instead of waiting on: the
case in flight is stopped and called inconclusive within a poll, never after a deadline.

A process can also stop answering without ending (SIGSTOP, a debugger, a stuck loop): its
pidfd never turns readable. So a lifeline may carry a *pulse*, a cheap look that says what
is wrong with it (or None); while any is watched, a wait is cut into ``PULSE_TICK_S``
slices and the pulses are looked at before and between them, and the first that speaks
raises ``LifelineCut`` with what it said.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from typing import Final

from harness.errors import SupervisorError

#: how often a wait looks at the pulses of its lifelines
PULSE_TICK_S: Final = 0.5

#: a look at a watched process that says what is wrong with it, or None
Pulse = Callable[[], str | None]


class LifelineCut(SupervisorError):
    """A watched process (``name``, ``pid``) ended while the harness waited on a worker, or
    its pulse said it stopped answering (``how``: what the pulse said)."""

    def __init__(self, name: str, pid: int, how: str | None = None) -> None:
        super().__init__(how or f"{name} (pid {pid}) ended")
        self.name = name
        self.pid = pid
        self.how = how


class Lifelines:
    """The pidfds of the processes a case needs alive; each one fires once, then is gone."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[str, int]] = {}  # pidfd -> (name, pid)
        self._ever: set[int] = set()
        self._pulses: dict[int, tuple[str, Pulse]] = {}  # pid -> (name, pulse)
        #: descriptors of the watched processes' own (a heartbeat pipe): a forked worker
        #: closes them with the pidfds (``close``), the harness never does
        self._child_closes: dict[int, tuple[int, ...]] = {}

    def watch(
        self, name: str, pid: int, *, pulse: Pulse | None = None, child_closes: Iterable[int] = ()
    ) -> None:
        """Watch ``pid`` (say ``name`` when it ends, or what ``pulse`` says when it says
        something). A pid already gone fires at once. ``child_closes``: descriptors a
        forked worker must not keep (the process's heartbeat pipe)."""
        self.forget(pid)
        self._ever.add(pid)
        if pulse is not None:
            self._pulses[pid] = (name, pulse)
        self._child_closes[pid] = tuple(child_closes)
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # ended (and reaped) before it could be watched
            fd = os.open(os.devnull, os.O_RDONLY)  # readable at once: fires on the next wait
        self._watched[fd] = (name, pid)

    def forget(self, pid: int) -> None:
        """Stop watching ``pid`` (a process stopped on purpose)."""
        self._pulses.pop(pid, None)
        self._child_closes.pop(pid, None)
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

    @property
    def pulsing(self) -> bool:
        """Whether any lifeline has a pulse (a wait must then be cut into slices)."""
        return bool(self._pulses)

    def feel(self) -> None:
        """Look at every pulse; ``LifelineCut`` (and forget it) for the first that says
        something is wrong."""
        for pid, (name, pulse) in list(self._pulses.items()):
            how = pulse()
            if how is not None:
                self.forget(pid)
                raise LifelineCut(name, pid, how)

    def check(self, ready: Iterable[int]) -> None:
        """Raise ``LifelineCut`` for the first watched pidfd in ``ready`` (and forget it, so
        the cleanup that follows can wait on workers again)."""
        for fd in ready:
            if fd in self._watched:
                name, pid = self._watched[fd]
                self.forget(pid)
                raise LifelineCut(name, pid)

    def close(self, *, in_child: bool = False) -> None:
        """Close every pidfd; ``in_child`` (a forked worker): the watched processes' own
        descriptors too (``child_closes``), which stay the harness's."""
        if in_child:
            for fds in self._child_closes.values():
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        for fd in list(self._watched):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._watched.clear()
        self._pulses.clear()
        self._child_closes.clear()
