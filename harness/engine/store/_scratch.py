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

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from harness.engine.store import _owner

#: environment variable naming the directory under which scratch work dirs are made
TMPDIR_ENV = "CRASH_HARNESS_TMPDIR"

_SHM = "/dev/shm"


def scratch_root() -> str | None:
    """The directory new work dirs go under (None: the platform's temporary directory).

    Raises ``BadInputError`` naming ``CRASH_HARNESS_TMPDIR`` when it names no folder we may
    write in."""
    chosen = os.environ.get(TMPDIR_ENV)
    if chosen:
        from harness.engine.store import _paths

        # a folder that exists and that we may write in: a run never makes it (a typo would
        # scatter work dirs), and finding it unusable only at the first case is a traceback
        _paths.writable_dir(Path(chosen), TMPDIR_ENV, make=False)
        return chosen
    if _is_writable_tmpfs(_SHM):
        return _SHM
    return None


#: every work dir's prefix starts so; the sweep looks at nothing else
PREFIX = "crash-harness-"
#: in a work dir: who made it (``harness.engine.store._owner``)
OWNER_FILE = ".crash-harness-owner"
#: in a work dir the harness kept on purpose (a failing run, --keep-workdir): never swept
KEPT_FILE = ".crash-harness-kept"
#: environment variable: how many kept work dirs stay (the newest); older ones of finished
#: runs are removed whenever a run keeps another
KEEP_ENV = "CRASH_HARNESS_KEEP_WORKDIRS"
#: how many kept work dirs stay when ``KEEP_ENV`` is unset: enough to compare the last few
#: failures, few enough that a tmpfs (RAM) is not filled by a day of red runs
DEFAULT_KEPT = 5
#: a run removes another project's kept work dirs only once they are this old: someone
#: else's evidence is theirs to look at (their own runs keep their count down)
KEPT_MAX_AGE_DAYS = 7
KEPT_MAX_AGE_S = KEPT_MAX_AGE_DAYS * 24 * 3600


class Removed(NamedTuple):
    """A work dir removed, and what it held (so ``clean`` can say what it freed)."""

    path: Path
    bytes: int


def make_workdir(prefix: str = PREFIX) -> Path:
    """A fresh, private work directory under :func:`scratch_root`, tagged with its maker."""
    assert prefix.startswith(PREFIX), prefix
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))
    (path / OWNER_FILE).write_text(_owner.me().tag() + "\n")
    return path


def keep(path: Path) -> None:
    """Mark a work dir kept on purpose: the harness said where it is, a person may look.

    The marker names the project the run was made for (``project``): a run prunes only its
    own project's kept dirs, so on a shared machine nobody's evidence goes because somebody
    else's runs failed."""
    if path.is_dir():
        (path / KEPT_FILE).write_text(
            f"kept: named in the run's output and report\n{_PROJECT_KEY}{project()}\n"
        )


#: in a kept dir's marker: the project it was kept for
_PROJECT_KEY = "project: "
#: what marks a project's root folder, looked for from the working directory upwards
_PROJECT_MARKS = (".git", "pyproject.toml", "setup.cfg", "setup.py")


def project() -> str:
    """The project a run works for: the nearest folder, from the working directory up, that
    holds ``.git`` or a Python project file; the working directory itself if none does."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the working directory was removed
        return "?"
    for folder in (cwd, *cwd.parents):
        if any((folder / mark).exists() for mark in _PROJECT_MARKS):
            return str(folder)
    return str(cwd)


def _project_of(path: Path) -> str | None:
    """The project a kept dir was kept for (None: kept before markers named one)."""
    try:
        text = (path / KEPT_FILE).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(_PROJECT_KEY):
            return line.removeprefix(_PROJECT_KEY)
    return None


def check_settings() -> None:
    """Refuse a bad ``CRASH_HARNESS_TMPDIR`` or ``CRASH_HARNESS_KEEP_WORKDIRS`` before any
    case runs (``BadInputError``), instead of when the first work dir is made or kept."""
    scratch_root()
    kept_limit()


def kept_limit() -> int:
    """How many kept work dirs stay (``CRASH_HARNESS_KEEP_WORKDIRS``, default 5).

    Read before a run starts, so a misspelt value is refused as bad input instead of being
    found only when the run ends and wants to keep its work dir."""
    from harness.errors import BadInputError

    raw = os.environ.get(KEEP_ENV, "").strip()
    if not raw:
        return DEFAULT_KEPT
    try:
        limit = int(raw)
    except ValueError:
        limit = -1
    if limit < 1:
        raise BadInputError(f"{KEEP_ENV}: expected a whole number of at least 1, found {raw!r}")
    return limit


def keep_and_prune(
    path: Path, *, limit: int | None = None, now: float | None = None
) -> list[Removed]:
    """Keep ``path`` and remove the kept work dirs of this project beyond the newest
    ``limit`` (``path`` included), so failing runs cannot fill the scratch tmpfs; another
    project's kept dirs go only once older than ``KEPT_MAX_AGE_DAYS`` (its runs prune their
    own). Only dirs whose maker is provably gone are removed: a live run's dir (this run's
    own, a parallel run's) is never touched, whatever its age. Returns what was removed."""
    keep(path)
    limit = kept_limit() if limit is None else limit
    now = time.time() if now is None else now
    mine = project()
    kept = [(p, _kept_at(p), _project_of(p)) for p in _ours() if (p / KEPT_FILE).exists()]
    same = [item for item in kept if item[2] == mine]
    same.sort(key=lambda item: (item[0] != path, -item[1]))  # this run's first, then newest
    doomed = [p for p, _, _ in same[limit:]]
    doomed += [p for p, at, owner in kept if owner != mine and now - at > KEPT_MAX_AGE_S]
    return [_remove(p) for p in doomed if _maker_gone(p)]


def sweep_stale(*, kept_too: bool = False) -> list[Removed]:
    """Remove the work dirs that runs killed before they could clean up left behind (their
    maker is provably gone); with ``kept_too``, also the ones kept on purpose. Returns them."""
    removed: list[Removed] = []
    for path in _ours():
        if not _maker_gone(path):
            continue
        if (path / KEPT_FILE).exists() and not kept_too:
            continue
        removed.append(_remove(path))
    return removed


def kept_dirs() -> list[Path]:
    """The kept work dirs of finished runs: what ``clean --kept`` would remove."""
    return [p for p in _ours() if (p / KEPT_FILE).exists() and _maker_gone(p)]


def _ours() -> list[Path]:
    """The directories under the scratch root named like work dirs (not yet proven ours)."""
    root = Path(scratch_root() or tempfile.gettempdir())
    try:
        return [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return []


def _maker_gone(path: Path) -> bool:
    """True only when the dir carries our owner tag and that owner is provably gone."""
    try:
        owner = _owner.parse((path / OWNER_FILE).read_text())
    except OSError:
        return False  # not ours to prove: never removed
    return owner is not None and _owner.is_gone(owner)


def _kept_at(path: Path) -> float:
    """When the dir was kept (its marker's mtime): the newest kept are the ones that stay."""
    try:
        return (path / KEPT_FILE).stat().st_mtime
    except OSError:
        return 0.0


def _remove(path: Path) -> Removed:
    size = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # gone already: nothing to count
                size += os.lstat(os.path.join(dirpath, name)).st_size
    shutil.rmtree(path, ignore_errors=True)
    return Removed(path, size)


def _is_writable_tmpfs(path: str) -> bool:
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    return any(len(m) > 2 and m[1] == path and m[2] == "tmpfs" for m in mounts)
