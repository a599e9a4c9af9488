"""A scenario file's checked tables made one ``Scenario``, section by section.

The schema (``_scenario_schema``) has already vouched for every key's type and range; what
is left is what one key alone cannot say (a mode among the known ones, an invariant that
exists, hold or violation but not both, a settle probe a non-daemon needs) and the defaults
a file may leave out. The sections are read in a fixed order, so a file with two mistakes
is always refused for the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.engine.plan._scenario_command import read_command
from harness.engine.plan._scenario_providers import read_providers
from harness.engine.plan._scenario_toml import ScenarioFile
from harness.engine.plan._scenario_type import Scenario
from harness.engine.plan._scenario_worker import read_worker
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process._boundary import SCOPES
from harness.engine.process.lifecycle import Lifecycle
from harness.engine.process.settle import Settle
from harness.errors import BadInputError
from harness.invariants import CHECKERS

_MODES = ("certify", "sweep", "list")


def build(source: ScenarioFile) -> Scenario:
    """The ``Scenario`` a file whose tables passed the schema says, or its first mistake."""
    meta = source.tables.get("scenario", {})
    if "system" not in meta:
        raise source.error("scenario", None, "missing key 'system' (e.g. system = \"reference\")")
    workload = source.tables.get("workload", {})
    providers = read_providers(source)
    worker = read_worker(source, meta)
    cases = _read_cases(source)
    settle = _read_settle(source, worker.lifecycle)
    hold, violation = _read_expectation(source)
    command = read_command(source, meta, [s.name for s in providers.specs])
    isolation = _read_database(source)
    broker = _read_broker(source)
    first = providers.specs[0]
    return Scenario(
        path=source.path,
        name=str(meta.get("name", source.path.stem)),
        description=str(meta.get("description", "")),
        system=str(meta["system"]),
        seed=meta.get("seed"),
        runs=int(workload.get("runs", 3)),
        destinations_per_topic=int(workload.get("destinations_per_topic", 2)),
        provider_preset=first.preset,
        provider_faults=first.faults,
        provider_window_s=first.window_s,
        worker_overrides=worker.overrides,
        worker_deadline_s=worker.deadline_s,
        mode=cases.mode,
        cases=cases.cases,
        depth=cases.depth,
        hold=hold,
        violation=violation,
        provider_options=first.options,
        crash_scope=cases.crash_scope,
        sample=cases.sample,
        all_hits=cases.all_hits,
        settle=settle,
        boundaries=command.boundaries,
        prepare=command.prepare,
        prepare_sql=command.prepare_sql,
        ledger=command.ledger,
        discover=meta.get("discover"),
        credentials=providers.credentials,
        lifecycle=worker.lifecycle,
        provider_name=first.name if providers.named else None,
        more_providers=providers.specs[1:],
        env=command.env,
        db_isolation=isolation,
        broker=broker,
        next_system=worker.next_system,
        prepare_next=worker.prepare_next,
    )


def _read_broker(source: ScenarioFile) -> str | None:
    """``[broker]``: a Redis the harness starts for the campaign, and how it persists;
    None: no such table (the worker's own broker, if any, is the worker's business)."""
    table = source.tables.get("broker")
    if table is None:
        return None
    kind = table.get("kind", "redis")
    if kind != "redis":
        raise source.error(
            "broker", "kind", f"expected redis (the one broker the harness starts), got {kind!r}"
        )
    persistence = table.get("persistence", "none")
    if persistence not in ("none", "aof"):
        raise source.error(
            "broker",
            "persistence",
            f"expected none (a restart empties it) or aof (every write appended and fsynced),"
            f" got {persistence!r}",
        )
    return str(persistence)


def _read_database(source: ScenarioFile) -> str:
    """``[database] isolation``: how a PostgreSQL case is kept apart (``schema``)."""
    isolation = source.tables.get("database", {}).get("isolation", "schema")
    if isolation not in ("schema", "database"):
        raise source.error(
            "database",
            "isolation",
            f"expected schema (a schema per case in the given database) or database (a"
            f" database per case on its server), got {isolation!r}",
        )
    return str(isolation)


@dataclass(frozen=True)
class _CasesTable:
    """``[cases]``, checked, with its defaults."""

    mode: str
    cases: tuple[CaseSpec, ...]
    depth: int
    crash_scope: str
    sample: int | None = None
    all_hits: bool = False


def _read_cases(source: ScenarioFile) -> _CasesTable:
    cases_table = source.tables.get("cases", {})
    mode = cases_table.get("mode", "certify")
    if mode not in _MODES:
        raise source.error("cases", "mode", f"expected one of {', '.join(_MODES)}, got {mode!r}")
    cases: list[CaseSpec] = []
    for item in cases_table.get("list", []):
        if not isinstance(item, str):
            raise source.error("cases", "list", f"expected case ids (strings), got {item!r}")
        try:
            cases.append(CaseSpec.parse(item))
        except BadInputError as exc:
            raise source.error("cases", "list", str(exc)) from None
    if mode == "list" and not cases:
        raise source.error("cases", "list", "mode 'list' needs at least one case id")
    depth = cases_table.get("depth", 1)
    crash_scope = cases_table.get("crash_scope", "worker")
    if crash_scope not in SCOPES:
        raise source.error(
            "cases",
            "crash_scope",
            f"expected one of {', '.join(SCOPES)}, got {crash_scope!r}",
        )
    sample, all_hits = cases_table.get("sample"), cases_table.get("all_hits", False)
    if all_hits and sample is not None:
        raise source.error(
            "cases", "sample", "all_hits = true crashes every hit; sample chooses some: give one"
        )
    return _CasesTable(mode, tuple(cases), depth, crash_scope, sample, all_hits)


def _read_settle(source: ScenarioFile, lifecycle: Lifecycle) -> Settle | None:
    """``[settle]``, or None for a system with no timers of its own to wait out."""
    settle_table = source.tables.get("settle")
    if settle_table is None and lifecycle.daemon:
        settle_table = {}  # a daemon settles on the provider's log or quiet alone
    if settle_table is None:
        return None
    if "probe" not in settle_table and not lifecycle.daemon:
        raise source.error("settle", None, "missing key 'probe' (a command or module:function)")
    try:
        return Settle(
            probe=settle_table.get("probe"),
            recovery=settle_table.get("recovery"),
            deadline_s=float(settle_table.get("deadline_s", 30.0)),
            interval_s=float(settle_table.get("interval_s", 0.5)),
            teardown=settle_table.get("teardown"),
            quiet_s=float(settle_table.get("quiet_s", 2.0)),
        )
    except BadInputError as exc:
        raise source.error("settle", None, str(exc)) from None


def _read_expectation(source: ScenarioFile) -> tuple[tuple[str, ...], str | None]:
    """``[expect]``: the invariants that must hold, or the one violation that must be found."""
    expect = source.tables.get("expect", {})
    hold_raw = expect.get("hold", "all")
    if isinstance(hold_raw, list):
        _check_hold_list(source, hold_raw)
    if "hold" in expect and "violation" in expect:
        raise source.error(
            "expect",
            "hold",
            "give hold (what must pass) or violation (what must be found), not both",
        )
    hold = (
        tuple(CHECKERS)
        if hold_raw == "all"
        else tuple([hold_raw] if isinstance(hold_raw, str) else hold_raw)
    )
    for name in hold:
        if name not in CHECKERS:
            raise source.error(
                "expect",
                "hold",
                f"unknown invariant {name!r}; known: {', '.join(CHECKERS)}",
            )
    violation = expect.get("violation")
    if violation is not None and violation not in CHECKERS:
        raise source.error(
            "expect",
            "violation",
            f"unknown invariant {violation!r}; known: {', '.join(CHECKERS)}",
        )
    return hold, violation


def _check_hold_list(source: ScenarioFile, hold: list[Any]) -> None:
    if not hold:
        # An empty list would make any run "hold every expected invariant": a scenario
        # that expects nothing is a mistake, never a pass.
        raise source.error(
            "expect",
            "hold",
            'expected at least one invariant name (or "all", the default); [] would'
            " expect nothing, so anything would pass",
        )
    for item in hold:
        if not isinstance(item, str):
            raise source.error("expect", "hold", f"expected invariant names, got {item!r}")
    if len(set(hold)) != len(hold):
        raise source.error("expect", "hold", "lists an invariant twice")
