"""A worker that names the ``public`` schema, as many do (``public.t``), then does the fixed
plain outbox's work: which rows of ``public.<table>`` does each case see?

It inserts one row saying who it is (``CH_TEST_RUN_TOKEN``, the harness run's own, and its
``{case.id}``), reads every row of the table back, and appends what it saw, with the
database, schema and URLs it was given, to ``CH_TEST_EVIDENCE`` (one JSON line per
incarnation). ``CH_TEST_PUBLIC_TABLE`` names the table (``t``).

Settings: ``DSN`` (``{db.dsn}``), ``DATABASE_URL`` (``{db.url}``), ``SCHEMA``
(``{db.schema}``), ``CASE_ID`` (``{case.id}``), and the outbox's ``WEBHOOK_URL`` and
``WEBHOOK_TOKEN``.
"""

from __future__ import annotations

import json
import os
import re

import psycopg

from examples.plain_outbox import worker_fixed


def main() -> None:
    table = os.environ.get("CH_TEST_PUBLIC_TABLE", "t")
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", table), table
    me = f"{os.environ['CH_TEST_RUN_TOKEN']}:{os.environ['CASE_ID']}"
    with psycopg.connect(os.environ["DSN"]) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS public.{table} (who TEXT)")
        conn.execute(f"INSERT INTO public.{table} VALUES (%s)", (me,))
        conn.commit()
        seen = sorted({row[0] for row in conn.execute(f"SELECT who FROM public.{table}")})
        database, schema = conn.execute("SELECT current_database(), current_schema()").fetchone()
    evidence = {
        "me": me,
        "seen": seen,
        "database": database,
        "schema": schema,
        "db_schema": os.environ["SCHEMA"],
        "db_url": os.environ["DATABASE_URL"],
        "dsn": os.environ["DSN"],
    }
    with open(os.environ["CH_TEST_EVIDENCE"], "a", encoding="utf-8") as f:
        f.write(json.dumps(evidence) + "\n")
    worker_fixed.main()


if __name__ == "__main__":
    main()
