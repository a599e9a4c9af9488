"""The database server going away under the harness: never a traceback, never a pass.

A PostgreSQL server can restart in the middle of a campaign (an operator, a failover, a
managed database's maintenance window; or a test restarting it on purpose). The worker's
handling of that is what a ``db_restart`` case tests. The harness's own reads and writes
(the case's schema made and dropped, the ledger read back for the verdict) must not turn it
into an "internal error" with exit 4 (seen before this module: 2 of 2 restarts of the
server in the middle of a reference certify). A read that fails because the server is
gone waits for it to come back and is made again, so the verdict rests on what the server
holds; a case that cannot be judged is unknown, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

T = TypeVar("T")

#: how long the harness waits for a database server that went away to take connections
#: again before it gives the case (and the campaign's next ones) up
BACK_WITHIN_S = 60.0
#: how often it looks
_POLL_S = 0.2
#: driver errors that mean the server ended the session or cannot be reached (psycopg's
#: OperationalError itself, raised on a failed connect or a dead connection, and three of its
#: subclasses; never a query error such as a lock timeout or a cancelled statement)
_SERVER_GONE = ("OperationalError", "AdminShutdown", "CrashShutdown", "CannotConnectNow")


def unreachable(exc: BaseException) -> str | None:
    """The reason, one line, when ``exc`` (or what caused it) says the PostgreSQL server
    went away or cannot be reached; None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return _first_line(current.orig or current)
        found = current.orig if isinstance(current, DBAPIError) else current
        kind = type(found)
        if kind.__module__.startswith("psycopg") and kind.__name__ in _SERVER_GONE:
            return _first_line(found)
        current = current.__cause__ or current.__context__
    return None


def _first_line(exc: BaseException | None) -> str:
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0] if said else ''}".strip()


def answers(url: str) -> bool:
    """Whether the server of ``url`` takes a connection now."""
    from harness.engine.store._db import open_engine

    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except DBAPIError:
        return False
    finally:
        engine.dispose()


def wait_back(url: str, within_s: float | None = None) -> float | None:
    """Wait for the server of ``url`` to take connections again; the seconds it took, or
    None if it did not within ``within_s`` (``BACK_WITHIN_S`` by default)."""
    budget = BACK_WITHIN_S if within_s is None else within_s
    began = time.monotonic()
    while True:
        if answers(url):
            return time.monotonic() - began
        if time.monotonic() - began > budget:
            return None
        time.sleep(_POLL_S)  # a poll of a server, not a wait for one of the harness's own


def again_when_back(url: str | None, what: str, step: Callable[[], T], notes: list[str]) -> T:
    """Run ``step`` (a read or write of the harness's own on the case's database); if it
    fails because the server went away, wait for it to come back and run it once more, and
    say so in ``notes``. Any other error, or a server not back in time, is raised."""
    try:
        return step()
    except Exception as exc:
        down = unreachable(exc) if url is not None and url.startswith("postgresql") else None
        if down is None or url is None:
            raise
        took = wait_back(url)
        if took is None:
            raise
        notes.append(
            f"the database server went away as the harness {what} ({down}); it took"
            f" connections again {took:.1f}s later and the harness {what} again"
        )
        return step()
