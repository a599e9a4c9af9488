"""When the harness cannot write (its disk full, read-only, over quota, failing): say so, and
never let it pass for something the worker did.

The trace, the ledger copies, the reports, the work dir and the provider's log are the
harness's own writes. One that fails is the machine's failure, not the system's: the case is
*unknown* with the reason (``the harness could not write PATH: No space left on device``),
never a violation, and never a traceback. The worker's own writes share the disk: a worker
that fails because the case's file system is full is not judged on that either; when the
file system is full at the end of a case (``full``), nothing in the case is decided.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

#: errors that say the place a write went to cannot take it: the machine's, never the worker's
HARNESS_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO})
#: a case's file system with less room than this at the end of the case is full: the next
#: write of anyone (a ledger page, a trace line) may not fit
MIN_ROOM_BYTES = 64 * 1024
#: the file ``full`` tries to write in the case's work dir
PROBE_NAME = ".room-probe"


def cannot_write(exc: BaseException, where: object = None) -> str | None:
    """``the harness could not write PATH: REASON`` for a failed write of the machine's kind
    (``HARNESS_WRITE_ERRNOS``), found in ``exc`` or what caused it; None for any other.
    ``where``: the file written, when the error does not name it (a write, not an open)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in HARNESS_WRITE_ERRNOS:
            named = seen.filename if seen.filename is not None else where
            where = named if named is not None else "its files"
            return f"the harness could not write {where}: {os.strerror(seen.errno or 0)}"
        seen = seen.__cause__ or seen.__context__
    return None


def full(path: Path) -> str | None:
    """Why the file system of ``path`` (a case's work dir) cannot take writes any more, or
    None: read-only, less than ``MIN_ROOM_BYTES`` free, or a small write refused there."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None  # gone: nothing to say about its room
    free = stats.f_bavail * stats.f_frsize
    if stats.f_flag & os.ST_RDONLY:
        return f"the harness could not write {path}: {os.strerror(errno.EROFS)}"
    probe = path / PROBE_NAME
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        said = cannot_write(exc, path)
        if said is not None:
            return f"{said} (the file system of the case's work dir is full: {free} bytes free)"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    if free < MIN_ROOM_BYTES:
        return (
            f"the harness could not write {path}: {os.strerror(errno.ENOSPC)}"
            f" (the file system of the case's work dir has {free} bytes free)"
        )
    return None
