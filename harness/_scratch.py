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
import shutil
import tempfile
from pathlib import Path

from harness import _owner

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


#: every work dir's prefix starts so; the sweep looks at nothing else
PREFIX = "crash-harness-"
#: in a work dir: who made it (``harness._owner``)
OWNER_FILE = ".crash-harness-owner"
#: in a work dir the harness kept on purpose (a failing run, --keep-workdir): never swept
KEPT_FILE = ".crash-harness-kept"


def make_workdir(prefix: str = PREFIX) -> Path:
    """A fresh, private work directory under :func:`scratch_root`, tagged with its maker."""
    assert prefix.startswith(PREFIX), prefix
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))
    (path / OWNER_FILE).write_text(_owner.me().tag() + "\n")
    return path


def keep(path: Path) -> None:
    """Mark a work dir kept on purpose: the harness said where it is, a person may look."""
    if path.is_dir():
        (path / KEPT_FILE).write_text("kept: named in the run's output and report\n")


def sweep_stale(*, kept_too: bool = False) -> list[Path]:
    """Remove the work dirs that runs killed before they could clean up left behind (their
    maker is provably gone); with ``kept_too``, also the ones kept on purpose. Returns them."""
    root = Path(scratch_root() or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return removed
    for path in candidates:
        try:
            owner = _owner.parse((path / OWNER_FILE).read_text())
        except OSError:
            continue  # not ours to prove: never removed
        if owner is None or not _owner.is_gone(owner):
            continue
        if (path / KEPT_FILE).exists() and not kept_too:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _is_writable_tmpfs(path: str) -> bool:
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    return any(len(m) > 2 and m[1] == path and m[2] == "tmpfs" for m in mounts)
