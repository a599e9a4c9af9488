"""Commands that work from scenario files: run, sweep, replay, and ``scenarios list|check``."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness.errors import BadInputError, ExitStatus
from harness.invariants import Status


def _settings(scenario: Any, *, seed: int | None, db_url: str | None, keep: bool) -> Any:
    from harness import _db, scenario as scenario_mod, systems
    from harness.campaign import CampaignSettings

    system = systems.resolve(scenario.system)
    chosen = seed if seed is not None else scenario.seed
    if chosen is None:
        chosen = secrets.randbelow(2**31)
    builtin = scenario.path.parent.resolve() == scenario_mod.builtin_dir().resolve()
    name = scenario.path.stem if builtin else str(scenario.path)
    return CampaignSettings(
        system=system,
        seed=chosen,
        db_url=_db.normalise_url(db_url) if db_url else None,
        worker_deadline_s=scenario.worker_deadline_s,
        keep_workdir=keep,
        runs=scenario.runs,
        destinations_per_topic=scenario.destinations_per_topic,
        provider_faults=scenario.provider_faults,
        worker_overrides=dict(scenario.worker_overrides),
        replay_prefix=["crash-harness", "replay", name],
    )


def print_case(case: Any) -> None:
    mark = {"pass": "ok  ", "fail": "FAIL", "unknown": "??? "}[case.verdict.value]
    failed = [n for n, r in case.invariants.items() if r.status is not Status.PASS]
    extra = f"  {', '.join(failed)}" if failed else ""
    click.echo(f"  {mark} {case.spec.id:<46} {case.duration_s:6.2f}s{extra}")
    for note in case.notes:
        click.echo(f"       note: {note}")
    if case.verdict is not Status.PASS:
        for w in case.workers:
            if w.stack_dump or (w.outcome_is_anomaly and w.stderr_tail):
                text = (w.stack_dump or w.stderr_tail).rstrip().splitlines()[-40:]
                click.echo("\n".join("       | " + line for line in text), err=True)
        click.echo(f"       replay: {case.replay}")


def judge(scenario: Any, result: Any) -> tuple[int, str]:
    """Turn a finished run into an exit status, by what the scenario says must happen."""
    fired = {
        name
        for case in result.cases
        for name, check in case.invariants.items()
        if check.status is Status.FAIL
    }
    if scenario.violation is not None:
        if scenario.violation in fired:
            return ExitStatus.PASSED, f"expected violation {scenario.violation} was found"
        return ExitStatus.VIOLATION, f"expected violation {scenario.violation} was NOT found"
    broken = sorted(fired & set(scenario.hold))
    if broken:
        return ExitStatus.VIOLATION, "invariants violated: " + ", ".join(broken)
    held_cases = [
        c
        for c in result.cases
        if any(c.invariants[n].status is not Status.PASS for n in scenario.hold if n in c.invariants)
        or any(w.outcome_is_anomaly for w in c.workers)
    ]
    if held_cases:
        return ExitStatus.INCONCLUSIVE, f"{len(held_cases)} case(s) inconclusive"
    return ExitStatus.PASSED, "every expected invariant holds"


def _execute(
    scenario_name: str,
    *,
    seed: int | None,
    db_url: str | None,
    report_dir: Path,
    keep: bool,
    mode: str | None = None,
    depth: int | None = None,
    only: tuple[str, ...] = (),
) -> None:
    from harness import report, scenario as scenario_mod
    from harness.campaign import Campaign, CampaignResult, CaseSpec, default_cases, finish_campaign
    from harness.sweep import sweep

    try:
        scenario = scenario_mod.load(scenario_mod.resolve_path(scenario_name))
        settings = _settings(scenario, seed=seed, db_url=db_url, keep=keep)
        mode = mode or scenario.mode
        click.echo(
            f"{mode} {scenario.name} · system {settings.system.name} · seed {settings.seed}"
            f" · db {'postgresql' if settings.db_url else 'sqlite'}"
        )
        cases: list[CaseSpec]
        if only:
            cases = [CaseSpec.parse(c) for c in only]
            mode = "list"
        elif mode == "list":
            cases = list(scenario.cases)
        else:
            cases = default_cases(settings.system)
        if mode != "sweep":
            settings.cases = cases
        with Campaign(settings) as campaign:
            result = CampaignResult(settings=settings, workdir=campaign.workdir)
            if mode == "sweep":
                results, coverage = sweep(
                    campaign, depth=depth or scenario.depth, on_case=print_case
                )
                result.cases.extend(results)
                result.extra["sweep"] = coverage.to_json()
            else:
                for case in cases:
                    one = campaign.run(case)
                    result.cases.append(one)
                    print_case(one)
        result = finish_campaign(result, campaign)
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("interrupted; every worker and provider was stopped", err=True)
        sys.exit(130)
    status, message = judge(scenario, result)
    result.extra["scenario"] = {
        "name": scenario.name,
        "path": str(scenario.path),
        "mode": mode,
        "expect_violation": scenario.violation,
        "expect_hold": list(scenario.hold),
        "outcome": message,
    }
    paths = report.write_reports(result, report_dir)
    if "sweep" in result.extra:
        cov = result.extra["sweep"]
        click.echo(
            f"sweep coverage: {cov['pairs_covered']}/{cov['pairs_expected']} (boundary, hit)"
            f" pairs; depth-2 cases {cov['depth2_fired']}/{cov['depth2_planned']}"
        )
    if result.workdir is not None:
        click.echo(f"work dir kept: {result.workdir}")
    click.echo(f"{message}")
    click.echo(f"report: {', '.join(str(p) for p in paths.values())}")
    sys.exit(status)


_common: list[Callable[[Any], Any]] = [
    click.argument("scenario_name", metavar="SCENARIO"),
    click.option("--seed", type=int, default=None, help="Workload seed (default: the file's)."),
    click.option("--db", "db_url", default=None, help="Ledger database URL (default SQLite)."),
    click.option(
        "--report-dir",
        type=click.Path(path_type=Path),
        default=Path("reports"),
        show_default=True,
    ),
    click.option("--keep-workdir", "keep", is_flag=True, help="Keep ledgers, traces and logs."),
]


def _with_common(fn: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in reversed(_common):
        fn = decorator(fn)
    return fn


@click.command("run")
@_with_common
@click.option("--case", "only", multiple=True, help="Run only these case ids.")
def run_cmd(
    *,
    scenario_name: str,
    seed: int | None,
    db_url: str | None,
    report_dir: Path,
    keep: bool,
    only: tuple[str, ...],
) -> None:
    """Run a scenario file (a path, or the name of a built-in) as it is written."""
    _execute(scenario_name, seed=seed, db_url=db_url, report_dir=report_dir, keep=keep, only=only)


@click.command("sweep")
@_with_common
@click.option("--depth", type=click.IntRange(1, 2), default=None, help="2: crash recoveries too.")
def sweep_cmd(
    *,
    scenario_name: str,
    seed: int | None,
    db_url: str | None,
    report_dir: Path,
    keep: bool,
    depth: int | None,
) -> None:
    """Dry-run a scenario, then crash at every (boundary, hit) it reached."""
    _execute(
        scenario_name,
        seed=seed,
        db_url=db_url,
        report_dir=report_dir,
        keep=keep,
        mode="sweep",
        depth=depth,
    )


@click.command("replay")
@_with_common
@click.option("--case", "only", multiple=True, required=True, help="The case id to rerun.")
def replay_cmd(
    *,
    scenario_name: str,
    seed: int | None,
    db_url: str | None,
    report_dir: Path,
    keep: bool,
    only: tuple[str, ...],
) -> None:
    """Rerun one case (or schedule) of a scenario exactly, from its seed and id."""
    _execute(scenario_name, seed=seed, db_url=db_url, report_dir=report_dir, keep=keep, only=only)


@click.group("scenarios")
def scenarios_group() -> None:
    """List the built-in scenarios or check scenario files."""


@scenarios_group.command("list")
def scenarios_list() -> None:
    """List the built-in scenarios with their descriptions."""
    from harness import scenario as scenario_mod

    for path in scenario_mod.builtin_paths():
        sc = scenario_mod.load(path)
        expect = f"expects {sc.violation}" if sc.violation else "must hold"
        click.echo(f"{path.stem:<40} {sc.mode:<8} {expect:<34} {sc.description}")


@scenarios_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def scenarios_check(files: tuple[Path, ...]) -> None:
    """Validate scenario files: syntax, keys, systems, faults and boundaries."""
    from harness import scenario as scenario_mod, systems
    from harness.campaign import validate_cases

    bad = 0
    for path in files:
        try:
            sc = scenario_mod.load(path)
            system = systems.resolve(sc.system)
            validate_cases(system, list(sc.cases))
            click.echo(f"ok    {path}")
        except BadInputError as exc:
            bad += 1
            click.echo(f"error {exc}", err=True)
    sys.exit(ExitStatus.BAD_INPUT if bad else ExitStatus.PASSED)


COMMANDS = [run_cmd, sweep_cmd, replay_cmd, scenarios_group]
