"""Call the user's own code that runs in the harness's process, and say where it broke.

A system's ``prepare``, its ``intent``, its ledger adapter and the module that defines it are
the user's glue, not the worker under test: an exception there says nothing about whether the
worker sends twice or loses a message, and nothing is wrong with the harness either. Left to
propagate it read as a traceback and exit 1 (the "violation found" code CI acts on) or exit 4;
here it becomes a ``GlueError`` (bad input, exit 2) in one line: what raised, the exception,
and the file and line of the user's code where it happened.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from harness.errors import GlueError, HarnessError

T = TypeVar("T")

#: folders whose frames are never "the user's line": this package, the standard library and
#: installed packages (a failing SQL query is the user's line that ran it, not SQLAlchemy's)
_NOT_USERS = tuple(
    os.path.realpath(p) + os.sep
    for p in {
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    }
)


def call(what: str, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``; an exception it raises (not one of the harness's own, which already
    say what is wrong) becomes a ``GlueError`` naming ``what`` and where it happened."""
    try:
        return fn(*args)
    except HarnessError:
        raise
    except Exception as exc:
        raise GlueError(describe(what, exc, fn)) from exc


def describe(what: str, exc: BaseException, fn: object = None) -> str:
    """One line: ``{what} raised {Type}: {message} (at FILE:LINE in FUNCTION)``."""
    message = " ".join(str(exc).split()) or "(no message)"
    if len(message) > 300:
        message = message[:297] + "..."
    where = _users_frame(exc.__traceback__) or _defined_at(fn)
    at = f" (at {where})" if where else ""
    return (
        f"{what} raised {type(exc).__name__}: {message}{at}; this is the system's own code,"
        " not the worker under test: fix it and run again"
    )


def _users_frame(tb: TracebackType | None) -> str | None:
    """The deepest frame of ``tb`` in the user's own files, as ``file:line in function``."""
    found = None
    for frame in traceback.extract_tb(tb):
        path = os.path.realpath(frame.filename)
        if frame.filename.startswith("<") or path.startswith(_NOT_USERS):
            continue
        found = f"{frame.filename}:{frame.lineno} in {frame.name}"
    return found


def _defined_at(fn: object) -> str | None:
    """Where ``fn`` is defined, when no frame of the traceback is the user's."""
    target = getattr(fn, "__func__", fn)
    try:
        path = inspect.getsourcefile(target)  # type: ignore[arg-type]
        _, line = inspect.getsourcelines(target)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None
    name = getattr(target, "__qualname__", None) or type(target).__name__
    return f"{path}:{line} in {name}" if path else None
