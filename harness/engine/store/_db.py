"""Open the ledger database the same way in the harness and in every worker process.

SQLite needs care to behave under concurrent writers and SIGKILL: WAL journal, a busy
timeout, and ``BEGIN IMMEDIATE`` so a reader never has to upgrade to a writer mid-transaction
(pysqlite's own transaction handling is switched off, as SQLAlchemy's docs recommend).
PostgreSQL cases each get their own schema, so parallel cases never see each other's rows;
with ``db_isolation = "database"`` each gets a database of its own instead, for a worker that
names ``public`` or a framework that makes schemas of its own (``new_target``).

Each process keeps one engine per target (``DatabaseTarget.engine``). The harness makes it
while it sets the case up, so a forked worker inherits an engine whose dialect is already
initialised, and gives it a fresh, empty pool before its first connection: no connection
ever crosses a fork, and no worker pays for building an engine. A case's SQLite ledger is
copied from a template made once per campaign (``prepare_target``), not rebuilt per case;
a case's own PostgreSQL database is made the same way, ``CREATE DATABASE ... TEMPLATE``.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from harness.engine.store import _owner, _pgdb, _secrets
from harness.errors import BadInputError, DatabaseUnreachableError

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: how a PostgreSQL case is kept apart from every other: a schema of its own in the given
#: database (the default), or a database of its own on the given server
ISOLATIONS = ("schema", "database")


@dataclass(frozen=True)
class DatabaseTarget:
    """Where one case's ledger lives: a SQLite file, a schema in a PostgreSQL database, or a
    PostgreSQL database of its own (``server_url`` set)."""

    url: str
    schema: str | None = None
    #: with a database of its own per case: the URL given (``--db``), through which the
    #: case's database (``url``) is made and dropped; None for a schema or a SQLite file
    server_url: str | None = None

    @property
    def own_database(self) -> str | None:
        """The name of the case's own PostgreSQL database, if it has one."""
        return None if self.server_url is None else make_url(self.url).database

    @property
    def kind(self) -> str:
        return "postgresql" if self.url.startswith("postgresql") else "sqlite"

    def engine(self) -> Engine:
        """This process's engine for the target (made on first use, then kept).

        In a forked child the engine inherited from the parent gets a new, empty pool on
        first use; the parent's connections are never touched. ``dispose()`` it when done
        with it, as with any engine: it stays usable and opens new connections on demand.
        An in-memory SQLite URL gets a new engine (a new database) on every call.
        """
        if self.url == "sqlite://" or ":memory:" in self.url:
            return open_engine(self.url, schema=self.schema)
        return _cached_engine(self.url, self.schema)


#: (url, schema) -> (pid that uses it, engine); bounded, and a case drops its own at the end
_ENGINES: dict[tuple[str, str | None], tuple[int, Engine]] = {}
_MAX_ENGINES = 16
_ENGINES_LOCK = threading.Lock()


def _reset_lock_in_child() -> None:
    global _ENGINES_LOCK
    _ENGINES_LOCK = threading.Lock()  # a lock held by another thread at fork stays held


os.register_at_fork(after_in_child=_reset_lock_in_child)


def _cached_engine(url: str, schema: str | None) -> Engine:
    key = (url, schema)
    pid = os.getpid()
    with _ENGINES_LOCK:
        found = _ENGINES.get(key)
        if found is not None:
            owner, engine = found
            if owner != pid:
                # Inherited across fork: a new pool for this process; the old one (empty, as
                # the harness disposes before it forks) is dropped without closing anything.
                engine.dispose(close=False)
                _ENGINES[key] = (pid, engine)
            return engine
        engine = open_engine(url, schema=schema)
        while len(_ENGINES) >= _MAX_ENGINES:
            old_key = next(iter(_ENGINES))
            old_pid, old = _ENGINES.pop(old_key)
            old.dispose(close=old_pid == pid)
        _ENGINES[key] = (pid, engine)
        return engine


def _forget_engine(url: str, schema: str | None) -> None:
    """Drop the kept engine of a target whose database goes away (or is made anew)."""
    with _ENGINES_LOCK:
        found = _ENGINES.pop((url, schema), None)
    if found is not None:
        owner, engine = found
        engine.dispose(close=owner == os.getpid())


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``sqlite:///`` as users write them; pick our drivers."""
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 - a port that is no number fails here, not mid-campaign
    except (ArgumentError, ValueError) as exc:
        shown = _secrets.hide_url_passwords(url)
        raise BadInputError(f"--db: {shown!r} is not a database URL ({exc})") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        _check_conninfo(parsed)
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if backend == "sqlite":
        _check_sqlite_path(parsed.database)
        return url
    raise BadInputError(f"--db: unsupported backend {backend!r}; use sqlite:/// or postgresql://")


def _check_conninfo(parsed: URL) -> None:
    """Let libpq read the URL as it will when the first case connects: an option it does
    not know (``?bogus=1``) is refused now, in one line, not as a traceback mid-campaign."""
    import psycopg
    from psycopg import pq

    conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        pq.Conninfo.parse(conninfo.encode())
    except psycopg.Error as exc:  # libpq's own words say what is wrong
        shown = parsed.render_as_string(hide_password=True)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(
            f"--db: {shown!r} is not a PostgreSQL URL libpq takes ({reason})"
        ) from None


#: what a case adds to the --db file's name: "-", its slug (at most 80), ".sqlite", "-wal"
LEDGER_NAME_ROOM = 1 + 80 + len(".sqlite") + len("-wal")


def _check_sqlite_path(database: str | None) -> None:
    """Each case's ledger is made next to the given file: its folder must be one we may
    write in (tried for real: root passes every permission check, and ``/proc`` refuses
    anyway), and the path itself a regular file or nothing yet (never ``/dev/null``)."""
    from harness.engine.store import _paths

    if not database or database == ":memory:":
        raise BadInputError(
            "--db: a sqlite URL needs a file path (sqlite:///path); each worker process must"
            " open the same file"
        )
    _paths.writable_file(Path(database), "--db", make_parent=False, room=LEDGER_NAME_ROOM)


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


#: how a SQLite transaction starts: take the write lock at once, never upgrade mid-way
SQLITE_BEGIN = "BEGIN IMMEDIATE"


def _sqlite_session(dbapi_conn: Any) -> None:
    """What every SQLite connection of every participant sets, pooled or not."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # A SIGKILL loses no page cache; NORMAL is durable against process death in WAL mode.
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        _sqlite_session(dbapi_conn)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(SQLITE_BEGIN)


@functools.lru_cache(maxsize=64)
def _parsed(url: str) -> URL:
    """A parsed URL, remembered: a forked worker inherits the parse its parent made."""
    return make_url(url)


def dbapi_connect(target: DatabaseTarget) -> Any:
    """A plain DBAPI connection to ``target``, set up exactly like the engine's connections.

    For code that runs many short transactions in a short-lived process (the reference
    ledger): no pool and no SQL compilation in between. SQLite: autocommit mode, so the
    caller starts each transaction with ``SQLITE_BEGIN`` and ends it with ``commit()`` or
    ``rollback()``; PostgreSQL (psycopg): a transaction starts with the first statement.
    The caller closes it.
    """
    url = _parsed(target.url)
    if target.kind == "sqlite":
        import sqlite3

        if not url.database or url.database == ":memory:":
            raise BadInputError("a plain connection needs a SQLite file, not an in-memory db")
        conn = sqlite3.connect(url.database, timeout=60, check_same_thread=False)
        _sqlite_session(conn)
        return conn
    import psycopg

    options: dict[str, Any] = {"connect_timeout": 10}
    if target.schema is not None:
        if not _SCHEMA_NAME.match(target.schema):
            raise BadInputError(f"invalid PostgreSQL schema name {target.schema!r}")
        options["options"] = f"-csearch_path={target.schema}"
    conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
    return psycopg.connect(conninfo, **options)


def check_reachable(url: str) -> None:
    """Fail early, naming the URL (without its password), if the database cannot be reached."""
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except DBAPIError as exc:  # unreachable, refused, or an option libpq rejects
        shown = make_url(url).render_as_string(hide_password=True)
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise DatabaseUnreachableError(f"--db: cannot connect to {shown}: {reason}") from None
    finally:
        engine.dispose()


#: how many runs may share one ``--db`` SQLite file at once (each under a name of its own)
MAX_SQLITE_RUNS = 64


@dataclass
class SqliteClaim:
    """A run's hold on the names its SQLite case ledgers get: ``<stem>-<case>.sqlite``.

    A case deletes its ledger file (and ``-wal``/``-shm``) before it starts, so two runs given
    the same ``--db`` file would delete each other's ledgers mid-case. Each run therefore
    holds an exclusive ``flock`` on ``<stem>.lock`` for as long as it (or a worker it forked)
    lives: the first run names its ledgers after the given file, a run that finds that name
    held takes ``<name>.run2``, ``.run3``... The lock file says who holds it (``_owner``);
    it is never deleted (unlinking a lock file races with the next run opening it)."""

    given: Path
    stem: Path
    fd: int
    #: who held the given file's name when this run had to take another (``Owner.tag``)
    other: str | None = None

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def note(self) -> str | None:
        """One line for the console when this run's ledgers are not named after the file."""
        if self.other is None:
            return None
        return (
            f"note: --db {self.given} is in use by another run ({self.other});"
            f" this run's ledgers are {ledger_path(self.stem, '<case>')}"
        )


def ledger_path(stem: Path, case_slug: str) -> Path:
    """Where a case's SQLite ledger goes, for the ``--db`` file (or claimed stem) ``stem``."""
    return stem.with_name(f"{stem.stem}-{case_slug}{stem.suffix or '.sqlite'}")


def claim_sqlite(url: str) -> SqliteClaim:
    """Take the first ledger name for the SQLite ``--db`` ``url`` that no live run holds."""
    given = make_url(url).database
    if not given:
        raise BadInputError("--db: a sqlite URL needs a file path (sqlite:///path)")
    path = Path(given)
    first_holder: str | None = None
    for n in range(1, MAX_SQLITE_RUNS + 1):
        stem = path if n == 1 else path.with_name(f"{path.stem}.run{n}{path.suffix or '.sqlite'}")
        lock = stem.with_name(f"{stem.name}.lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise BadInputError(f"--db: cannot make the lock file {lock}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if first_holder is None:
                first_holder = _holder(fd)
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_owner.me().tag() + "\n").encode(), 0)
        return SqliteClaim(given=path, stem=stem, fd=fd, other=first_holder)
    raise BadInputError(
        f"--db: {path} is in use by {MAX_SQLITE_RUNS} runs at once ({first_holder});"
        " give this run another file"
    )


def _holder(fd: int) -> str:
    """Who holds a ledger lock, in words: "pid 123, started 2026-12-04 07:10:02 on HOST"."""
    try:
        owner = _owner.parse(os.pread(fd, 512, 0).decode(errors="replace"))
    except OSError:
        owner = None
    if owner is None:
        return "a run that has not said who it is yet"
    started = _owner.started_at(owner)
    when = (
        ""
        if started is None
        else time.strftime(", started %Y-%m-%d %H:%M:%S", time.localtime(started))
    )
    return f"pid {owner.pid}{when} on {owner.host}"


def new_target(
    base_url: str | None,
    *,
    workdir: Path,
    case_slug: str,
    stem: Path | None = None,
    isolation: str = "schema",
) -> DatabaseTarget:
    """A fresh, empty ledger for one case (with a ``--db`` SQLite file: named after ``stem``,
    the run's ``SqliteClaim``, or else after the file itself).

    On PostgreSQL, ``isolation`` "schema" makes a schema in the given database; "database"
    names a database of its own on the same server, which ``prepare_target`` makes (from the
    campaign's template): nothing exists on the server until then, and ``drop_target``
    drops it whether or not it was made. SQLite cases have a file each either way."""
    if base_url is None or base_url.startswith("sqlite"):
        if base_url is None:
            path = workdir / f"{case_slug}.sqlite"
        else:
            given = make_url(base_url).database
            if not given:
                raise BadInputError("--db: a sqlite URL needs a file path (sqlite:///path)")
            path = ledger_path(stem or Path(given), case_slug)
        url = f"sqlite:///{path}"
        _forget_engine(url, None)  # a rerun of the same case starts from a new file
        path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        return DatabaseTarget(url=url)
    # PostgreSQL keeps 63 bytes of a name: shorten the slug, never the random part (a long
    # case id cut to the same prefix twice would collide with a schema kept for forensics).
    schema = f"ch_{case_slug[:53]}_{secrets.token_hex(3)}"
    if isolation == "database":
        return DatabaseTarget(url=_pgdb.on_database(base_url, schema), server_url=base_url)
    if isolation != "schema":
        raise BadInputError(f"db_isolation: expected one of {', '.join(ISOLATIONS)}")
    engine = open_engine(base_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            _tag_schema(conn, schema)
    finally:
        engine.dispose()
    return DatabaseTarget(url=base_url, schema=schema)


def _tag_schema(conn: Connection, schema: str) -> None:
    """Say who made ``schema`` (``harness.engine.store._owner``): proof it is ours, and whether its
    maker
    still runs, for the sweep after a harness killed mid-case."""
    tag = _owner.me().tag().replace("'", "")
    conn.execute(text(f"COMMENT ON SCHEMA \"{schema}\" IS '{tag}'"))


def sweep_stale_schemas(url: str) -> list[str]:
    """Drop the case and snapshot schemas whose maker is provably gone (a harness killed
    before it could drop them); a schema without our tag, or of a live run, stays."""
    engine = open_engine(url)
    dropped: list[str] = []
    try:
        with engine.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT n.nspname, d.description FROM pg_namespace n"
                    " JOIN pg_description d ON d.objoid = n.oid"
                    " AND d.classoid = 'pg_namespace'::regclass"
                    " WHERE n.nspname LIKE 'ch\\_%' AND d.description LIKE :prefix"
                ),
                {"prefix": f"{_owner.PREFIX} %"},
            ).all()
            for name, description in rows:
                owner = _owner.parse(description)
                if owner is not None and _owner.is_gone(owner):
                    conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
                    dropped.append(name)
    finally:
        engine.dispose()
    return dropped


def drop_target(target: DatabaseTarget) -> None:
    """Remove a PostgreSQL case schema, or a case's own database (its connections ended
    first: a worker's leftover process may still hold one); SQLite files stay in the work
    dir for forensics."""
    _forget_engine(target.url, target.schema)
    own = target.own_database
    if own is not None and target.server_url is not None:
        _pgdb.drop(target.server_url, own)
        return
    if target.schema is None:
        return
    engine = open_engine(target.url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{target.schema}" CASCADE'))
    finally:
        engine.dispose()


def prepare_target(
    target: DatabaseTarget, prepare: Callable[[Engine], None], *, template: Path | None
) -> None:
    """Give a fresh target its schema and starting rows: ``prepare(engine)``, run once.

    For SQLite with a ``template`` path, the first call runs ``prepare`` and keeps a copy of
    the result there; later calls with the same path copy that file instead (a plain file
    copy of a closed database holding exactly what ``prepare`` made). The caller names the
    template after everything ``prepare`` depends on. A case's own PostgreSQL database is
    made here, the same way: with a ``template`` path, the first call makes a template
    database and runs ``prepare`` in it, and every case's database is a copy of it (``CREATE
    DATABASE ... TEMPLATE``, dropped by ``drop_templates``); without one, an empty database
    and ``prepare``. Either way the target's engine is left initialised and without
    connections, ready to be inherited by forked workers.
    """
    if target.server_url is not None:
        _make_own_database(target, prepare, template)
    engine = target.engine()
    try:
        # parsed here, so a forked worker finds the URL parsed already (see ``_parsed``)
        path = _parsed(target.url).database if target.kind == "sqlite" else None
        if target.server_url is not None:
            pass  # made and prepared above
        elif template is not None and path and template.exists():
            shutil.copyfile(template, path)
        else:
            prepare(engine)
            if template is not None and path:
                engine.dispose()
                partial = template.with_name(f"{template.name}.{os.getpid()}.tmp")
                _sqlite_copy(path, str(partial))
                os.replace(partial, template)
        with engine.connect():
            pass  # the dialect learns the server's ways once, here, not in every worker
    finally:
        engine.dispose()  # never fork with open connections


@dataclass(frozen=True)
class _Template:
    """A campaign's prepared template database: who made it, on which server, its name."""

    pid: int
    server_url: str
    name: str


#: template path (``prepare_target``'s ``template``) -> the database made for it
_TEMPLATES: dict[Path, _Template] = {}


def _make_own_database(
    target: DatabaseTarget, prepare: Callable[[Engine], None], template: Path | None
) -> None:
    """Make a case's own database: a copy of the campaign's template database (made, and
    ``prepare`` run in it, on the first call for ``template``), or empty and prepared."""
    server, name = target.server_url, target.own_database
    assert server is not None
    assert name is not None
    if template is None:
        _pgdb.create(server, name)
        engine = target.engine()
        try:
            prepare(engine)
        finally:
            engine.dispose()
        return
    made = _TEMPLATES.get(template)
    if made is None or made.pid != os.getpid() or made.server_url != server:
        made = _Template(os.getpid(), server, f"ch_template_{secrets.token_hex(4)}")
        _pgdb.create(server, made.name)
        try:
            engine = open_engine(_pgdb.on_database(server, made.name))
            try:
                prepare(engine)
            finally:
                engine.dispose()  # CREATE DATABASE copies only a template nobody is on
        except BaseException:
            _pgdb.drop(server, made.name)
            raise
        _TEMPLATES[template] = made
    _pgdb.create(server, name, template=made.name)


def drop_templates(workdir: Path) -> list[str]:
    """Drop the template databases this process made for the campaign in ``workdir`` (a
    forked job's are its own: another work dir, another pid); returns their names."""
    dropped = []
    for path, made in list(_TEMPLATES.items()):
        if path.is_relative_to(workdir) and made.pid == os.getpid():
            del _TEMPLATES[path]
            _pgdb.drop(made.server_url, made.name)
            dropped.append(made.name)
    return dropped


def _sqlite_copy(source: str, dest: str) -> None:
    """A consistent copy of a SQLite database, whatever its WAL holds (the backup API)."""
    import sqlite3

    with sqlite3.connect(source) as src, sqlite3.connect(dest) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def snapshot(target: DatabaseTarget, name: str) -> str:
    """Copy the whole ledger aside (a "backup"); returns a handle for ``restore``.

    A PostgreSQL case's tables are copied into snapshot schemas beside them: its schema's,
    or with a database of its own every schema in it that holds tables (``public``, a
    framework's own), each into a schema of its own."""
    if target.kind == "sqlite":
        import sqlite3

        path = make_url(target.url).database
        assert path
        snap = f"{path}.{name}.bak"
        with sqlite3.connect(path) as src, sqlite3.connect(snap) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return snap
    token = secrets.token_hex(3)
    engine = open_engine(target.url)
    pairs: list[tuple[str, str]] = []
    try:
        with engine.begin() as conn:
            if target.schema is not None:
                # within PostgreSQL's 63 bytes, and never the case's own name cut short
                pairs = [(target.schema, f"{target.schema[:40]}_{name[:12]}_{token}")]
            else:
                pairs = [
                    (schema, f"ch_snap_{name[:12]}_{token}_{i}")
                    for i, schema in enumerate(_schemas_with_tables(conn))
                ]
            for source, snap_schema in pairs:
                conn.execute(text(f'CREATE SCHEMA "{snap_schema}"'))
                _tag_schema(conn, snap_schema)
                for table in _tables(conn, source):
                    conn.execute(
                        text(
                            f'CREATE TABLE "{snap_schema}"."{table}" AS TABLE "{source}"."{table}"'
                        )
                    )
    finally:
        engine.dispose()
    return ";".join(f"{source}={snap_schema}" for source, snap_schema in pairs)


def restore(target: DatabaseTarget, handle: str) -> None:
    """Put the ledger back exactly as ``snapshot`` found it (no worker may be running)."""
    if target.kind == "sqlite":
        import sqlite3

        path = make_url(target.url).database
        assert path
        with sqlite3.connect(handle) as src, sqlite3.connect(path) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return
    pairs = [tuple(pair.split("=", 1)) for pair in handle.split(";") if pair]
    engine = open_engine(target.url)
    try:
        with engine.begin() as conn:
            tables = [
                (source, snap_schema, table)
                for source, snap_schema in pairs
                for table in _tables(conn, snap_schema)
            ]
            if tables:  # one statement: rows that refer to each other go together
                listed = ", ".join(f'"{source}"."{table}"' for source, _, table in tables)
                conn.execute(text(f"TRUNCATE {listed}"))
            for source, snap_schema, table in tables:
                conn.execute(
                    text(
                        f'INSERT INTO "{source}"."{table}" SELECT * FROM "{snap_schema}"."{table}"'
                    )
                )
            for source, snap_schema in pairs:
                _reset_serials(conn, source)
                conn.execute(text(f'DROP SCHEMA "{snap_schema}" CASCADE'))
    finally:
        engine.dispose()


def _reset_serials(conn: Any, schema: str) -> None:
    """Serial columns must not hand out ids the restored rows already use."""
    for table, column in conn.execute(
        text(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = :s AND column_default LIKE 'nextval%'"
        ),
        {"s": schema},
    ).all():
        conn.execute(
            text(
                f'SELECT setval(pg_get_serial_sequence(\'"{schema}"."{table}"\','
                f" '{column}'), COALESCE((SELECT max({column}) FROM "
                f'"{schema}"."{table}"), 0) + 1, false)'
            )
        )


def _schemas_with_tables(conn: Any) -> list[str]:
    """A case database's own schemas that hold tables (not the catalog's, not snapshots)."""
    rows = conn.execute(
        text(
            "SELECT DISTINCT schemaname FROM pg_tables WHERE schemaname NOT IN"
            " ('pg_catalog', 'information_schema') AND schemaname NOT LIKE 'ch\\_snap\\_%'"
            " ORDER BY schemaname"
        )
    )
    return [r[0] for r in rows]


def _tables(conn: Any, schema: str) -> list[str]:
    rows = conn.execute(
        text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY tablename"),
        {"s": schema},
    )
    return [r[0] for r in rows]
