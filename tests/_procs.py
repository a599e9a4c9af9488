"""Watching the processes a test starts: readiness on a FIFO, and who carries a marker."""

from __future__ import annotations

import os
import select
from pathlib import Path


def wait_ready(fifo: Path, timeout_s: float = 60) -> None:
    """Block until a worker writes to ``fifo`` (``CH_TEST_READY_FIFO``), never a sleep."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        assert ready, "the worker never started"
    finally:
        os.close(fd)


def processes_with(marker: str) -> list[int]:
    """Every process but this one whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
