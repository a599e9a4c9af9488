"""Where a campaign keeps its scratch files (case ledgers, traces, hit counters, logs).

A case writes and fsyncs a fresh SQLite ledger, creates a counter file per boundary, and a
worker's last connection checkpoints its WAL on exit: on a disk that is a few milliseconds per
worker, which is most of what a fast case costs. The harness kills processes; it never cuts the
power. So an fsync buys no durability a case can observe, and a RAM-backed ``tmpfs`` gives the
same SQLite files, locks and crash semantics at memory speed. ``/dev/shm`` is used when it is a
writable tmpfs; ``CRASH_HARNESS_TMPDIR`` picks another place (``CampaignSettings.workdir`` a
fixed one).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: environment variable naming the directory under which scratch work dirs are made
TMPDIR_ENV = "CRASH_HARNESS_TMPDIR"

_SHM = "/dev/shm"


def scratch_root() -> str | None:
    """The directory new work dirs go under (None: the platform's temporary directory)."""
    chosen = os.environ.get(TMPDIR_ENV)
    if chosen:
        return chosen
    if _is_writable_tmpfs(_SHM):
        return _SHM
    return None


def make_workdir(prefix: str = "crash-harness-") -> Path:
    """A fresh, private work directory under :func:`scratch_root`."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))


def _is_writable_tmpfs(path: str) -> bool:
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    return any(len(m) > 2 and m[1] == path and m[2] == "tmpfs" for m in mounts)
