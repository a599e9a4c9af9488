"""Systems whose glue (the user's own code the harness runs in its process) raises.

Importable as ``tests._glue_systems:NAME``. Each is the reference with one piece of glue
replaced, so nothing about the worker is wrong: every failure here is a setup error of the
user's (exit 2), never a finding (exit 1) and never the harness's own failure (exit 4).
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from harness.errors import SupervisorError
from harness.snapshot import LedgerSnapshot
from harness.systems import resolve

_REF = resolve("reference")


def _prepare_raises(engine: Engine) -> None:
    _REF.prepare(engine)
    raise RuntimeError("orders table template missing")  # GLUE-LINE prepare


def _prepare_raises_after_the_dry_run(engine: Engine) -> None:
    """Breaks on every case database but the first (a sweep's dry run): the error comes
    from a forked job when the sweep runs on two."""
    _REF.prepare(engine)
    if "baseline" not in str(engine.url) and "dry" not in str(engine.url):
        raise RuntimeError("second case broke")  # GLUE-LINE later


def _read_ledger_raises(engine: Engine) -> LedgerSnapshot:
    row = {"state": "delivered"}
    return row["status"]  # type: ignore[return-value]  # GLUE-LINE adapter


def _read_ledger_database_error(engine: Engine) -> LedgerSnapshot:
    raise OperationalError("SELECT status FROM deliveries", {}, Exception("no such table"))


def _prepare_breaks_the_harness(engine: Engine) -> None:
    raise SupervisorError("a harness failure, standing in for any the harness did not expect")


def _intent_raises(engine: Engine) -> None:
    raise ValueError("intent query names a column that is not there")  # GLUE-LINE intent


PREPARE_RAISES = replace(_REF, name="tests._glue_systems:PREPARE_RAISES", prepare=_prepare_raises)
PREPARE_RAISES_LATER = replace(
    _REF,
    name="tests._glue_systems:PREPARE_RAISES_LATER",
    prepare=_prepare_raises_after_the_dry_run,
)
READ_LEDGER_RAISES = replace(
    _REF, name="tests._glue_systems:READ_LEDGER_RAISES", read_ledger=_read_ledger_raises
)
READ_LEDGER_DATABASE_ERROR = replace(
    _REF,
    name="tests._glue_systems:READ_LEDGER_DATABASE_ERROR",
    read_ledger=_read_ledger_database_error,
)
INTENT_RAISES = replace(_REF, name="tests._glue_systems:INTENT_RAISES", intent=_intent_raises)
HARNESS_FAILS = replace(
    _REF, name="tests._glue_systems:HARNESS_FAILS", prepare=_prepare_breaks_the_harness
)
