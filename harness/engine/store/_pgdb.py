"""Databases of their own on a PostgreSQL server: a case's (``db_isolation = "database"``) and
its campaign's template, made, tagged, dropped and swept.

Each is made through the database the user gave (``--db``), named ``ch_<case>_<random>``
(``ch_template_<random>`` for a template) and tagged with its maker (``COMMENT ON DATABASE``,
``harness.engine.store._owner``), as a case schema is: a run drops only what it made, and a
sweep only what a provably dead run made, never what a live run on this or another host
holds, nor an untagged database that merely looks like ours.

``CREATE DATABASE`` and ``DROP DATABASE`` cannot run in a transaction, so every statement
here runs on its own autocommit connection, opened for it and closed after it: no connection
of the harness is ever inherited by a forked worker.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from sqlalchemy.engine import make_url

from harness.engine.store import _owner
from harness.errors import BadInputError

#: what a database of ours may be called (quoted in SQL all the same)
_NAME = re.compile(r"^ch_[a-z0-9_]{1,60}$")
#: ``DROP DATABASE ... WITH (FORCE)``: PostgreSQL 13 and later
_MIN_SERVER = 130000
#: the setting that asks for a database per case, as the messages name it
SETTING = 'db_isolation = "database" ([database] isolation, or --set db_isolation=\'"database"\')'


def on_database(url: str, name: str) -> str:
    """``url`` (SQLAlchemy's form, password kept) naming database ``name`` instead."""
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _shown(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=True)


@contextlib.contextmanager
def _admin(url: str) -> Iterator[Any]:
    """An autocommit connection to the given database, closed on the way out."""
    import psycopg

    conn = psycopg.connect(_conninfo(url), autocommit=True, connect_timeout=10)
    try:
        yield conn
    finally:
        conn.close()


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise BadInputError(f"invalid case database name {name!r}")
    return name


def _refused(url: str, role: str, reason: str) -> BadInputError:
    return BadInputError(
        f"{SETTING}: the server at {_shown(url)} refuses CREATE DATABASE to role {role!r}"
        f" ({reason}); grant it (ALTER ROLE {role} CREATEDB) or leave the setting at"
        ' "schema", a schema per case in the given database'
    )


def check_may_create(url: str) -> None:
    """Before any case of a campaign with a database per case: the role may create databases
    on this server (``CREATEDB`` or superuser), which is new enough to drop a database whose
    connections a killed worker left (13+). One line naming the setting otherwise."""
    with _admin(url) as conn:
        role, allowed, version = conn.execute(
            "SELECT current_user, rolcreatedb OR rolsuper, current_setting('server_version_num')"
            "::int FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    if version < _MIN_SERVER:
        raise BadInputError(
            f"{SETTING}: the server at {_shown(url)} is PostgreSQL {version // 10000}; a"
            " database per case needs 13 or later (DROP DATABASE ... WITH (FORCE))"
        )
    if not allowed:
        raise _refused(url, role, "it has no CREATEDB")


def create(url: str, name: str, *, template: str | None = None) -> None:
    """``CREATE DATABASE name`` (a copy of ``template``), tagged as this process's."""
    import psycopg

    tag = _owner.me().tag().replace("'", "")
    copy = "" if template is None else f' TEMPLATE "{_checked(template)}"'
    with _admin(url) as conn:
        try:
            conn.execute(f'CREATE DATABASE "{_checked(name)}"{copy}')
        except psycopg.errors.InsufficientPrivilege as exc:
            role = conn.execute("SELECT current_user").fetchone()[0]
            raise _refused(url, role, _first_line(exc)) from None
        # Two statements (CREATE DATABASE runs in no transaction): a harness SIGKILLed
        # between them leaves a database without a tag, which no sweep can prove ours.
        conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{tag}'")


def drop(url: str, name: str) -> None:
    """``DROP DATABASE name``, its connections ended first (a leftover worker's, say)."""
    with _admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{_checked(name)}" WITH (FORCE)')


def sweep_stale(url: str) -> list[str]:
    """Drop the case and template databases on ``url``'s server whose maker is provably gone
    (a harness killed before it could drop them); an untagged one, one of a live run or of
    another host, and one this role may not drop, stay."""
    import psycopg

    dropped: list[str] = []
    with _admin(url) as conn:
        rows = conn.execute(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database"
            " WHERE datname LIKE 'ch\\_%%' AND datname <> current_database()"
            " AND shobj_description(oid, 'pg_database') LIKE %s",
            (f"{_owner.PREFIX} %",),
        ).fetchall()
        for name, description in rows:
            owner = _owner.parse(description)
            if owner is None or not _owner.is_gone(owner) or not _NAME.match(name):
                continue
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.errors.InsufficientPrivilege:
                continue  # another role's: its owner's next run sweeps it
            dropped.append(name)
    return dropped


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
