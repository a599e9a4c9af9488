"""A clock the harness can move, shared by the harness, its workers and the fake providers.

Dedupe windows are hours long and leases seconds long; a test cannot wait for either. Every
participant reads *wall time plus an offset*; the offset lives in a small file that the
harness rewrites (and mirrors to the providers' admin clock), so "24 hours later" takes a
millisecond and every process agrees on it. Without a file the clock is plain wall time.
"""

from __future__ import annotations

import os
import time

#: width of the offset record; fixed so a reader never sees half a write
_WIDTH = 32


class SharedClock:
    """Wall time plus an offset read from ``path`` on every call (a single pread)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = -1

    def _descriptor(self) -> int:
        assert self.path is not None
        if self._fd is None or self._pid != os.getpid():  # reopen after fork
            self._fd = os.open(self.path, os.O_RDONLY)
            self._pid = os.getpid()
        return self._fd

    def close(self) -> None:
        """Let go of the file (a long campaign makes one clock per case)."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def offset(self) -> float:
        if self.path is None:
            return 0.0
        raw = os.pread(self._descriptor(), _WIDTH, 0)
        return float(raw.decode().strip() or 0.0)

    def now(self) -> float:
        return time.time() + self.offset()

    def sleep_until(self, when: float, *, autojump: bool, cap_s: float) -> None:
        """Wait until ``when`` on this clock: jump there at once, or sleep (at most ``cap_s``)."""
        delay = when - self.now()
        if delay <= 0:
            return
        if autojump and self.path is not None:
            self.advance(delay)
            return
        time.sleep(min(cap_s, delay))

    @staticmethod
    def create(path: str) -> SharedClock:
        """Start a clock file at offset zero (harness side)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{0.0:<{_WIDTH}}".encode())
        finally:
            os.close(fd)
        return SharedClock(path)

    def advance(self, seconds: float) -> float:
        """Move every reader of this clock forward (harness side); returns the new offset."""
        if self.path is None:
            raise RuntimeError("a wall clock cannot be moved; create a SharedClock file")
        if seconds < 0:
            raise ValueError("the shared clock only moves forward")
        new = self.offset() + seconds
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, f"{new:<{_WIDTH}.6f}".encode(), 0)
        finally:
            os.close(fd)
        return new
