"""A provider's heartbeat: its serving loop says it turns, on a pipe only its starter reads.

A provider that stops answering (SIGSTOPped, frozen by a debugger, its accept loop stuck)
keeps its sockets open: its clients see neither a refusal nor a reset, only read time-outs,
and a caller that judges it by failed requests waits out every one of them. So the server's
own loop writes a beat (its ``time.monotonic()``, 8 bytes: one atomic pipe write) every
``BEAT_S`` to a pipe inherited from whoever started it (``ProviderProcess``), which reads
them without ever blocking on the provider: no socket the provider serves, nothing a client
can hold or flood. Silence there is the provider's own silence.

The monotonic clock is the machine's (``CLOCK_MONOTONIC``), the same in both processes, so
the reader knows when the provider was last heard of, not when it happened to read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import time
from typing import Final

#: how often a serving provider beats
BEAT_S: Final = 0.25
_RECORD: Final = struct.Struct("=d")


class Beat:
    """The provider side: ``__call__`` on every turn of the serving loop writes a beat at
    most every ``BEAT_S``. Never blocks: a full pipe (a reader that stopped reading) drops
    the beat."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._last = 0.0
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self._last < BEAT_S:
            return
        self._last = now
        with contextlib.suppress(BlockingIOError, BrokenPipeError, OSError):
            os.write(self._fd, _RECORD.pack(now))


class Listener:
    """The starter side: the read end of one provider's beat pipe. ``heard()`` drains what
    came and says when the provider last beat (``time.monotonic()``), or when the listener
    was made if it never did."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self._last = time.monotonic()
        self._partial = b""

    def heard(self) -> float:
        """The provider's last beat (monotonic seconds), after reading every beat waiting.

        A pipe found full means beats were dropped while nobody read: the provider beat
        until just now as far as anyone can tell, so the time of this read is taken."""
        data = self._partial
        full = False
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:  # the provider is gone: its death is watched elsewhere
                break
            data += chunk
            full = full or len(chunk) >= 65536 - _RECORD.size
        usable = len(data) - len(data) % _RECORD.size
        self._partial = data[usable:]
        if usable:
            (beat,) = _RECORD.unpack_from(data, usable - _RECORD.size)
            self._last = max(self._last, beat)
        if full:
            self._last = time.monotonic()
        return self._last

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
