"""A clock file: one absolute reading (seconds since the Unix epoch) that others move.

The harness gives every case a clock that starts at a value fixed by the seed and moves only
when the harness or a worker moves it (``harness.clock``). A provider told to follow that
file (``POST /_admin/reset`` with ``clock_path``) stamps its records with the same reading,
so the provider's ``received_at``, its dedupe windows and the workers' ledger times agree to
the microsecond and replay identically. The record has a fixed width, written with one
``pwrite``, so a reader never sees half a write.
"""

from __future__ import annotations

import os
from typing import Final

#: width of the reading record (ASCII float, left-aligned, space padded)
WIDTH: Final = 32


def encode(reading: float) -> bytes:
    """The fixed-width record for ``reading``."""
    return f"{reading:<{WIDTH}.6f}".encode()


def decode(raw: bytes) -> float:
    """The reading in a record (an empty file reads as 0.0)."""
    return float(raw.decode().strip() or 0.0)


class FileClock:
    """Reads a clock file on every call (a single ``pread``); reopens after a fork."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = -1

    def _descriptor(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDONLY)
            self._pid = os.getpid()
        return self._fd

    def now(self) -> float:
        return decode(os.pread(self._descriptor(), WIDTH, 0))

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None
