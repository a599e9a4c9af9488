"""A clock the harness can move, shared by the harness, its workers and the fake providers.

Dedupe windows are hours long and leases seconds long; a test cannot wait for either. And
logic that buckets time (per minute, per day) must see the same times when a case is
replayed. So a case's clock is not wall time: it is one reading in a small file, which

- starts at a value fixed by the seed (``start_for_seed``: 2030-01-01T00:00:00Z plus a
  seed-derived whole number of seconds under a year, so seeds land on different days and
  minutes, and a replay lands on the same ones);
- moves only when the harness moves it (a restart gap, a clock jump) or when a worker sleeps
  on it: ``sleep_until`` with ``autojump`` jumps straight to the wake-up time (trio's
  MockClock), without it the worker really sleeps (at most ``cap_s``) and the clock moves by
  what it slept; ``waited(s)`` says that ``s`` seconds went by in a real-time wait (the
  reference calls it after a request timed out: the worker did wait that long).

Reading it never moves it: a worker that is fast or slow sees the same times. Real-time
waits (a request timeout, a rival's lease) still take real time; only the readings are
deterministic. The fake provider of a case follows the same file (``AdminClient.reset(...,
clock_path=...)``), so its ``received_at`` and windows agree with the workers' ledger.
Without a file the clock is plain wall time (production).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable
from typing import Final

#: the clock file's record: the same fixed-width ASCII float ``fake_providers._clock`` reads
#: (kept here too so that ``import harness`` stays light; a test checks they agree)
WIDTH: Final = 32


def encode(reading: float) -> bytes:
    return f"{reading:<{WIDTH}.6f}".encode()


def decode(raw: bytes) -> float:
    return float(raw.decode().strip() or 0.0)


#: where every seeded clock starts before its seed's offset: 2030-01-01T00:00:00Z
CLOCK_EPOCH: Final = 1_893_456_000.0
_YEAR_S: Final = 365 * 86_400


def start_for_seed(seed: int) -> float:
    """The reading a case's clock starts at: ``CLOCK_EPOCH`` plus a whole number of seconds
    under a year, taken from sha256 of the seed (the same for every case of a run)."""
    digest = hashlib.sha256(f"crash-harness clock {seed}".encode()).digest()
    return CLOCK_EPOCH + int.from_bytes(digest[:8], "big") % _YEAR_S


class SharedClock:
    """The reading in ``path`` (a single pread per call), or wall time without a path."""

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

    def now(self) -> float:
        if self.path is None:
            return time.time()
        return decode(os.pread(self._descriptor(), WIDTH, 0))

    def sleep_until(self, when: float, *, autojump: bool, cap_s: float) -> None:
        """Wait until ``when`` on this clock: jump there at once (``autojump``), or sleep for
        real (at most ``cap_s``) and move the clock by what was slept."""
        delay = when - self.now()
        if delay <= 0:
            return
        if self.path is None:
            time.sleep(min(cap_s, delay))
            return
        if autojump:
            self._move(lambda now: max(now, when))
            return
        slept = min(cap_s, delay)
        time.sleep(slept)
        self.waited(slept)

    def waited(self, seconds: float) -> None:
        """``seconds`` went by in a real-time wait (a request that timed out): move the clock
        by as much. A no-op on wall time, where they have already gone by."""
        if self.path is not None and seconds > 0:
            self._move(lambda now: now + seconds)

    @staticmethod
    def create(path: str, *, start: float) -> SharedClock:
        """Start a clock file at ``start`` (harness side)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, encode(start))
        finally:
            os.close(fd)
        return SharedClock(path)

    def advance(self, seconds: float) -> float:
        """Move every reader of this clock forward (harness side); returns the new reading."""
        if self.path is None:
            raise RuntimeError("a wall clock cannot be moved; create a SharedClock file")
        if seconds < 0:
            raise ValueError("the shared clock only moves forward")
        return self._move(lambda now: now + seconds)

    def _move(self, to: Callable[[float], float]) -> float:
        """Read, compute and write under an exclusive lock, so two workers jumping at once
        never move the clock backwards."""
        assert self.path is not None
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = decode(os.pread(fd, WIDTH, 0))
            new = max(now, to(now))
            os.pwrite(fd, encode(new), 0)
            return new
        finally:
            os.close(fd)  # closing releases the lock
