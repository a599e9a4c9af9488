"""``crash-harness ledger status|resolve``: the operator's view of a delivery ledger."""

from __future__ import annotations

import getpass
import importlib
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from harness.errors import BadInputError, ExitStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine

#: the operator's tool for the reference system's ledger schema: it belongs to the reference,
#: so the command line finds it by name, as it finds a system
OPERATOR = "harness.reference.operator"

_DB_HELP = "Ledger database URL (sqlite:///path or postgresql://...)."
_SCHEMA_HELP = "PostgreSQL schema holding the ledger tables (default: the search path)."


def _operator() -> Any:
    return importlib.import_module(OPERATOR)


@contextmanager
def _ledger(url: str, schema: str | None) -> Iterator[Engine]:
    operator = _operator()

    try:
        engine = operator.connect(url, schema=schema)
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    try:
        yield engine
    finally:
        engine.dispose()


@click.group("ledger")
def ledger() -> None:
    """Inspect a delivery ledger and settle the items waiting for an operator."""


@ledger.command("status")
@click.option("--db", "db_url", required=True, help=_DB_HELP)
@click.option("--schema", default=None, help=_SCHEMA_HELP)
@click.option(
    "--grace",
    type=click.FloatRange(min=0.0),
    default=60.0,
    show_default=True,
    help="Seconds past next_attempt_at before a pending or unknown item counts as overdue.",
)
@click.option(
    "--all", "show_all", is_flag=True, help="List every delivery, not only those needing attention."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def status(*, db_url: str, schema: str | None, grace: float, show_all: bool, as_json: bool) -> None:
    """Deliveries by state with counts and ages; overdue, unknown and review items listed."""
    operator = _operator()

    with _ledger(db_url, schema) as engine:
        data = operator.ledger_status(engine, now=time.time(), grace_s=grace)
    if not show_all:
        data["deliveries"] = [d for d in data["deliveries"] if operator.needs_attention(d)]
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    _print_tables(data, show_all=show_all)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def _print_tables(data: dict[str, Any], *, show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    states = Table(title=f"deliveries: {data['total']}", title_justify="left")
    states.add_column("state")
    states.add_column("count", justify="right")
    states.add_column("oldest", justify="right")
    states.add_column("newest", justify="right")
    for name, entry in data["states"].items():
        states.add_row(
            name, str(entry["count"]), _age(entry["oldest_age_s"]), _age(entry["newest_age_s"])
        )
    od = data["overdue"]
    states.add_row(
        "[bold red]overdue[/]" if od["count"] else "overdue",
        str(od["count"]),
        _age(od["max_overdue_s"]),
        "",
        end_section=False,
    )
    console.print(states)
    console.print(
        f"overdue = pending/unknown more than {data['grace_s']:g}s past next_attempt_at,"
        " or claimed with an expired lease"
    )
    items = data["deliveries"]
    if not items:
        console.print("nothing needs attention" if not show_all else "the ledger is empty")
        return
    table = Table(title="all deliveries" if show_all else "needs attention", title_justify="left")
    for col in ("delivery_id", "state", "overdue by", "age", "attempts", "destination", "run"):
        table.add_column(col, no_wrap=col in ("delivery_id", "state"))
    table.add_column("last error", overflow="fold")
    for d in items:
        table.add_row(
            d["delivery_id"],
            d["state"],
            _age(d["overdue_by_s"]) if d["overdue"] else "",
            _age(d["age_s"]),
            str(d["attempts"]),
            d["destination"],
            d["run_id"],
            d["last_error"] or "",
        )
    console.print(table)
    if any(d["state"] in ("review", "unknown") for d in items):
        console.print(
            "settle one with: crash-harness ledger resolve DELIVERY_ID --as delivered|failed"
            ' --note "why" --db URL'
        )


@ledger.command("resolve")
@click.argument("delivery_id")
@click.option(
    "--as",
    "outcome",
    type=click.Choice(["delivered", "failed"]),
    required=True,
    help="What the operator found out: the provider has it (delivered) or does not (failed).",
)
@click.option("--note", required=True, help="Why; kept in the audit trail with your name.")
@click.option("--db", "db_url", required=True, help=_DB_HELP)
@click.option("--schema", default=None, help=_SCHEMA_HELP)
@click.option(
    "--operator",
    "operator_name",
    default=None,
    help="Who is resolving (default: the login name).",
)
def resolve(
    delivery_id: str,
    outcome: str,
    note: str,
    db_url: str,
    schema: str | None,
    operator_name: str | None,
) -> None:
    """Settle a delivery in review (or unknown) as delivered or failed, with an audit record.

    DELIVERY_ID is the delivery's id as `crash-harness ledger status` lists it.
    """
    operator = _operator()

    who = operator_name or _login()
    with _ledger(db_url, schema) as engine:
        try:
            done = operator.resolve(
                engine, delivery_id, outcome=outcome, note=note, operator=who, now=time.time()
            )
        except BadInputError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(ExitStatus.BAD_INPUT)
    click.echo(
        f"{delivery_id}: {done['previous_state']} -> {done['state']}"
        f" (resolved by {who}; audit event {done['event_id']})"
    )


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER") or "operator"


COMMANDS = [ledger]
