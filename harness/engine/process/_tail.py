"""The end of a worker's output file, read without reading the rest of it.

A worker may print gigabytes; a report quotes only the end of its stderr, and of a hung
worker's stack dump. Reading just those bytes keeps what a worker prints from costing the
harness time or memory, however much it is.
"""

from __future__ import annotations

import os
from pathlib import Path


def file_size(path: Path) -> int:
    """The file's size now (0 if it cannot be read): where a later read starts."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_tail(path: Path, limit: int, *, start: int = 0) -> str:
    """The last ``limit`` bytes of the file at ``path`` (from ``start`` on) as text; when
    more came before them, a first line says how many bytes were cut and where they are.

    Only those bytes are read: a worker that prints gigabytes costs the harness nothing."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            begin = max(start, size - limit)
            f.seek(begin)
            data = f.read(limit)
    except OSError:
        return ""
    if begin == start:
        return data.decode(errors="replace")
    cut = begin - start
    while data[:1] and 0x80 <= data[0] <= 0xBF:  # not a character cut in two
        data = data[1:]
        cut += 1
    head = f"[{cut} bytes cut before this; all of it is {path.name} in the work dir]\n"
    return head + data.decode(errors="replace")
