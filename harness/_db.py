"""Open the ledger database the same way in the harness and in every worker process.

SQLite needs care to behave under concurrent writers and SIGKILL: WAL journal, a busy
timeout, and ``BEGIN IMMEDIATE`` so a reader never has to upgrade to a writer mid-transaction
(pysqlite's own transaction handling is switched off, as SQLAlchemy's docs recommend).
PostgreSQL cases each get their own schema, so parallel cases never see each other's rows.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from harness.errors import BadInputError, DatabaseUnreachableError

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class DatabaseTarget:
    """Where one case's ledger lives: a SQLite file, or a schema in a PostgreSQL database."""

    url: str
    schema: str | None = None

    @property
    def kind(self) -> str:
        return "postgresql" if self.url.startswith("postgresql") else "sqlite"

    def engine(self) -> Engine:
        """A new engine; call it after fork, never share one across processes."""
        return open_engine(self.url, schema=self.schema)


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``sqlite:///`` as users write them; pick our drivers."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise BadInputError(f"--db: {url!r} is not a database URL ({exc})") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if backend == "sqlite":
        return url
    raise BadInputError(f"--db: unsupported backend {backend!r}; use sqlite:/// or postgresql://")


def open_engine(url: str, *, schema: str | None = None) -> Engine:
    """Create an engine with the pragmas and search path every participant must share."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})
        _tune_sqlite(engine)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": 10}
    if schema is not None:
        if not _SCHEMA_NAME.match(schema):
            raise BadInputError(f"invalid PostgreSQL schema name {schema!r}")
        connect_args["options"] = f"-csearch_path={schema}"
    return create_engine(url, connect_args=connect_args, pool_pre_ping=False)


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        # A SIGKILL loses no page cache; NORMAL is durable against process death in WAL mode.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def check_reachable(url: str) -> None:
    """Fail early, naming the URL (without its password), if the database cannot be reached."""
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise DatabaseUnreachableError(f"--db: cannot connect to {shown}: {reason}") from None
    finally:
        engine.dispose()


def new_target(base_url: str | None, *, workdir: Path, case_slug: str) -> DatabaseTarget:
    """A fresh, empty ledger for one case."""
    if base_url is None or base_url.startswith("sqlite"):
        if base_url is None:
            path = workdir / f"{case_slug}.sqlite"
        else:
            given = make_url(base_url).database
            if not given:
                raise BadInputError("--db: a sqlite URL needs a file path (sqlite:///path)")
            stem = Path(given)
            path = stem.with_name(f"{stem.stem}-{case_slug}{stem.suffix or '.sqlite'}")
        path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        return DatabaseTarget(url=f"sqlite:///{path}")
    schema = f"ch_{case_slug}_{secrets.token_hex(3)}"[:63]
    engine = open_engine(base_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    finally:
        engine.dispose()
    return DatabaseTarget(url=base_url, schema=schema)


def drop_target(target: DatabaseTarget) -> None:
    """Remove a PostgreSQL case schema; SQLite files stay in the work dir for forensics."""
    if target.schema is None:
        return
    engine = open_engine(target.url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{target.schema}" CASCADE'))
    finally:
        engine.dispose()


def snapshot(target: DatabaseTarget, name: str) -> str:
    """Copy the whole ledger aside (a "backup"); returns a handle for ``restore``."""
    if target.schema is None:
        import sqlite3

        path = make_url(target.url).database
        assert path
        snap = f"{path}.{name}.bak"
        with sqlite3.connect(path) as src, sqlite3.connect(snap) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return snap
    snap_schema = f"{target.schema}_{name}"[:63]
    engine = open_engine(target.url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{snap_schema}"'))
            for table in _tables(conn, target.schema):
                conn.execute(
                    text(
                        f'CREATE TABLE "{snap_schema}"."{table}" AS '
                        f'TABLE "{target.schema}"."{table}"'
                    )
                )
    finally:
        engine.dispose()
    return snap_schema


def restore(target: DatabaseTarget, handle: str) -> None:
    """Put the ledger back exactly as ``snapshot`` found it (no worker may be running)."""
    if target.schema is None:
        import sqlite3

        path = make_url(target.url).database
        assert path
        with sqlite3.connect(handle) as src, sqlite3.connect(path) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return
    engine = open_engine(target.url)
    try:
        with engine.begin() as conn:
            for table in _tables(conn, target.schema):
                conn.execute(text(f'TRUNCATE "{target.schema}"."{table}"'))
                conn.execute(
                    text(
                        f'INSERT INTO "{target.schema}"."{table}" '
                        f'SELECT * FROM "{handle}"."{table}"'
                    )
                )
            # serial columns must not hand out ids the restored rows already use
            for table, column in conn.execute(
                text(
                    "SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = :s AND column_default LIKE 'nextval%'"
                ),
                {"s": target.schema},
            ):
                conn.execute(
                    text(
                        f'SELECT setval(pg_get_serial_sequence(\'"{target.schema}"."{table}"\','
                        f" '{column}'), COALESCE((SELECT max({column}) FROM "
                        f'"{target.schema}"."{table}"), 0) + 1, false)'
                    )
                )
            conn.execute(text(f'DROP SCHEMA "{handle}" CASCADE'))
    finally:
        engine.dispose()


def _tables(conn: Any, schema: str) -> list[str]:
    rows = conn.execute(
        text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY tablename"),
        {"s": schema},
    )
    return [r[0] for r in rows]
