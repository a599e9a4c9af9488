"""Open the ledger database the way the harness set it up, from a worker or a tool.

Every participant of a case (the harness, each worker process, an operator's tool) must
open the database alike: on SQLite the WAL journal, a busy timeout and ``BEGIN IMMEDIATE``
(``SQLITE_BEGIN``), so a reader never upgrades to a writer mid-transaction; on PostgreSQL
the case's own schema on the search path (or, with ``db_isolation = "database"``, the
case's own database). A worker gets its case's database as
``config.db`` (a ``DatabaseTarget``): ``config.db.engine()`` is a SQLAlchemy engine set up
that way, ``dbapi_connect(config.db)`` a plain DBAPI connection set up the same way (for a
worker that runs many short transactions, as the reference ledger does).

``open_engine(url)``, ``normalise_url(url)`` and ``check_reachable(url)`` open a database a
person names by URL (an operator's ``--db``), with the same settings.

The implementation is the engine's (``harness.engine.store._db``); this module is the part a system
may
rely on.
"""

from __future__ import annotations

from harness.engine.store._db import (
    SQLITE_BEGIN,
    DatabaseTarget,
    check_reachable,
    dbapi_connect,
    normalise_url,
    open_engine,
)

__all__ = [
    "SQLITE_BEGIN",
    "DatabaseTarget",
    "check_reachable",
    "dbapi_connect",
    "normalise_url",
    "open_engine",
]
