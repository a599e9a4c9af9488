"""Paths a user names for the harness to write in, checked in one place before anything runs.

``--report-dir``, ``--db sqlite:///FILE``, ``mutants --json`` and ``CRASH_HARNESS_TMPDIR`` all
name somewhere the harness will write minutes later; a path it cannot use there is found only
after the campaign ran, as a traceback. So each is tried for real up front: permission bits do
not bind root and ``/proc`` refuses anyway, so a probe directory is made and removed (nothing is
left behind: bad input elsewhere must leave no trace); a name longer than the file system takes
is refused by its length (``stat`` on it raises instead of saying "absent"); a device such as
``/dev/null`` is never a file the harness writes. Every refusal is one ``BadInputError`` line
naming the option and what was expected.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from harness.errors import BadInputError

#: how much of an over-long path a message shows (the rest is counted, not printed)
SHOWN = 60
#: the longest name and path Linux takes (``os.pathconf`` may say less for a mount)
NAME_MAX = 255
PATH_MAX = 4096


def shown(path: Path | str) -> str:
    """``path`` as a message shows it: whole when short, else its start and its length."""
    text = str(path)
    if len(text) <= SHOWN:
        return text
    return f"{text[:SHOWN]}... ({len(text)} characters)"


def _check_length(path: Path, what: str, *, room: int = 0) -> None:
    """Refuse a path the file system cannot name (``room``: characters the harness adds to
    the last name, e.g. a case's suffix on a ledger file)."""
    full = os.fsencode(path.absolute())
    names = os.fsencode(path).split(b"/")
    longest = max(len(n) for n in names) if names else 0
    last = len(names[-1]) + room if names else room
    if len(full) + room >= PATH_MAX or longest > NAME_MAX or last > NAME_MAX:
        extra = f", plus {room} the harness adds" if room else ""
        raise BadInputError(
            f"{what}: {shown(path)} is too long (a name may have at most {NAME_MAX} bytes{extra},"
            f" a whole path {PATH_MAX - 1})"
        )


def exists(path: Path, what: str) -> bool:
    """``path.exists()`` for a path a user named: a name too long to look up, or one under a
    file, is refused (``BadInputError``) instead of raising ``OSError`` from ``stat``."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise BadInputError(f"{what}: {shown(path)}: a parent is not a directory") from None
        raise BadInputError(f"{what}: cannot use {shown(path)} ({exc.strerror})") from None
    return True


def writable_dir(path: Path, what: str, *, make: bool = True) -> Path:
    """A folder we may write in, or (``make``) one we may make. Returns ``path``."""
    _check_length(path, what)
    if exists(path, what) and not path.is_dir():
        raise BadInputError(f"{what}: {shown(path)} exists and is not a directory")
    ancestor = path.absolute()
    while not exists(ancestor, what):
        ancestor = ancestor.parent
    if not make and ancestor != path.absolute():
        raise BadInputError(f"{what}: {shown(path)} does not exist (expected a directory)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".crash-harness-probe-", dir=ancestor))
    except OSError as exc:
        where = "write in"
        if ancestor != path.absolute():
            where = f"make {shown(path)}: cannot write in"
        raise BadInputError(f"{what}: cannot {where} {shown(ancestor)} ({exc.strerror})") from None
    return path


def writable_file(path: Path, what: str, *, make_parent: bool = True, room: int = 0) -> Path:
    """A regular file we may create or replace (never a device, a folder or ``/proc``): its
    folder is one we may write in (or, ``make_parent``, make). Returns ``path``."""
    _check_length(path, what, room=room)
    if exists(path, what) and not path.is_file():
        raise BadInputError(f"{what}: {shown(path)} exists and is not a regular file")
    writable_dir(path.absolute().parent, what, make=make_parent)
    return path
