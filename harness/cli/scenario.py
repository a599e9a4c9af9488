"""Commands that work from scenario files: run, sweep, replay, and ``scenarios list|check``."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from harness.cli import _complete, _echo, _progress, _style
from harness.cli import _values as _cli_values
from harness.engine.store import _scratch
from harness.errors import BadInputError, ExitStatus, interruption
from harness.invariants import Status


def _settings(
    scenario: Any,
    *,
    seed: int | None,
    db_url: str | None,
    keep: bool,
    set_words: tuple[str, ...] = (),
) -> Any:
    from harness.engine.plan import _overrides
    from harness.engine.plan import scenario as scenario_mod
    from harness.engine.results import CampaignSettings
    from harness.engine.store import _db

    system = scenario.checked_system()
    chosen = seed if seed is not None else scenario.seed
    if chosen is None:
        chosen = secrets.randbelow(2**31)
    builtin = scenario.path.parent.resolve() == scenario_mod.builtin_dir().resolve()
    name = scenario.path.stem if builtin else str(scenario.path)
    given = dict(_overrides.parse(word) for word in set_words)
    return CampaignSettings(
        system=system,
        seed=chosen,
        db_url=_db.normalise_url(db_url) if db_url else None,
        keep_workdir=keep,
        replay_prefix=["crash-harness", "replay", name],
        replay_overrides=given,
        **{**scenario.campaign_fields(), **given},
    )


def _said_it_raised(notes: list[str], worker: str) -> bool:
    return any(n.startswith(f"worker {worker} raised ") for n in notes)


def looks_text(results: Any) -> str:
    """What a case line adds after its duration: the failed invariants by name, then the
    undecided ones marked as such (one rule with the reports: ``harness.invariants.looks``);
    empty when nothing failed or was undecided. A not-judged check is no finding: not named."""
    from harness.invariants import looks

    groups = looks.grouped(results)
    parts = []
    if groups["fail"]:
        parts.append(", ".join(groups["fail"]))
    if groups["undecided"]:
        parts.append("undecided: " + ", ".join(groups["undecided"]))
    return "  " + "; ".join(parts) if parts else ""


#: invariants whose failure the console explains with its summary: a second message under
#: made-up ids is found nowhere else on the console (no duplicate key, no lost delivery), so
#: the line names the recipients it reached
_SUMMARY_ON_CONSOLE = frozenset({"no_unintended_effect"})


def print_case(case: Any, counter: str = "", *, width: int = 46) -> None:
    """A finished case's line (mark, id, duration, ``[N/M]``, what failed), its notes, and
    for a case that did not pass the workers' stack dumps and the replay command."""
    from harness.cli._echo import counted, mark_of
    from harness.engine.store import _secrets
    from harness.invariants import fixes, looks

    mark = mark_of(case.verdict.value)
    extra = looks_text(case.invariants)
    left = list(getattr(case, "leftovers", ()))
    if left:  # why a case whose invariants held is not a pass
        extra += f"  {len(left)} process(es) outlived their worker or the case"
    _style.echo(
        f"  {mark} {case.spec.id:<{width}} {case.duration_s:6.2f}s{counted(counter)}{extra}"
    )
    for name in looks.grouped(case.invariants)["fail"]:
        if name in _SUMMARY_ON_CONSOLE:  # who got the second message, before how to fix it
            _style.echo(f"       {name}: {_secrets.scrub(case.invariants[name].summary)}")
        said = fixes.fix_line(name, agent=fixes.is_agent(case.reached))
        if said:
            _style.echo(f"       {name} {said}")
    for note in case.notes:
        click.echo(f"       note: {_secrets.scrub(note)}")
    for each in left:
        _style.echo(f"       straggler: {each.line()}")
    if case.runs:
        said = ", then ".join(r.verdict.value for r in case.runs)
        click.echo(f"       runs of this schedule: {said} (same seed, same schedule)")
    if case.verdict is not Status.PASS:
        explained = {w.worker for w in case.workers if _said_it_raised(case.notes, w.worker)}
        for w in case.workers:
            if w.worker in explained and not w.stack_dump:
                continue  # one line said it; the traceback is in the report
            if w.stack_dump or (w.outcome_is_anomaly and w.stderr_tail):
                text = (w.stack_dump or w.stderr_tail).rstrip().splitlines()[-40:]
                click.echo("\n".join("       | " + line for line in text), err=True)
        click.echo(f"       replay: {case.replay}")


def expectation(scenario: Any, *, drawn: bool = False) -> Any:
    """What a scenario says must come out of it (``harness.reports.outcome.Expectation``)."""
    from harness.reports.outcome import Expectation

    return Expectation(hold=tuple(scenario.hold), violation=scenario.violation, drawn=drawn)


def judge_report(scenario: Any, result: Any, mode: str) -> tuple[Any, dict[str, Any]]:
    """Judge the report a run will write (one rule for every route): ``(outcome, data)``,
    the report JSON carrying its outcome. The verdict is printed before any format is
    rendered, so it never waits on the HTML."""
    from harness import reports
    from harness.reports.outcome import judge

    result.extra["scenario"] = {
        "name": scenario.name,
        "path": str(scenario.path),
        "mode": mode,
        "expect_violation": scenario.violation,
        "expect_hold": list(scenario.hold),
    }
    data = reports.to_json(result)
    outcome = judge(data, expectation(scenario, drawn=mode == "explore"))
    data["scenario"]["outcome"] = outcome.message
    result.extra["scenario"]["outcome"] = outcome.message
    return outcome, data


def stop_interrupted(
    exc: KeyboardInterrupt,
    *,
    settings: Any,
    done: list[Any],
    workdir: Path | None,
    report_dir: Path,
) -> NoReturn:
    """After Ctrl-C or SIGTERM: say so, write a partial report of the cases that finished,
    keep the work dir and say where both are; exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    from harness import reports
    from harness.engine.results import CampaignResult

    _progress.clear_live()
    why, status = interruption(exc)
    click.echo(f"{why}; every worker and provider was stopped", err=True)
    if settings is not None and done:
        if settings.cases is None:  # a sweep's plan is what it got to
            settings.cases = [c.spec for c in done]
        result = CampaignResult(settings=settings, workdir=workdir)
        result.cases.extend(done)
        data = reports.to_json(result)
        data["partial"] = True
        paths = reports.write_all(data, report_dir)
        click.echo(f"partial report ({len(done)} case(s)): {paths['json']}", err=True)
    if workdir is not None and workdir.exists():
        from harness.cli._echo import echo_kept

        echo_kept(workdir, err=True)
    sys.exit(status)


def settle_workdir(result: Any, data: dict[str, Any], outcome: Any, *, keep: bool) -> None:
    """Once the run is judged: a run that met its expectation (an expected violation
    included) drops its work dir unless ``--keep-workdir`` asked for it, since nobody will
    look into a green run; any other kept dir is named, and older kept ones pruned."""
    import shutil

    from harness.cli._echo import echo_kept

    if result.workdir is None:
        return
    if outcome.status == ExitStatus.PASSED and not keep:
        shutil.rmtree(result.workdir, ignore_errors=True)
        result.workdir = None
        data["workdir"] = None
        return
    echo_kept(result.workdir)


def _execute(
    scenario_name: str,
    *,
    seed: int | None,
    db_url: str | None,
    report_dir: Path,
    keep: bool,
    jobs: int = 1,
    shard: str | None = None,
    mode: str | None = None,
    depth: int | None = None,
    only: tuple[str, ...] = (),
    determinism: int = 0,
    set_words: tuple[str, ...] = (),
    verb: str | None = None,
    hit_sample: int | None = None,
    all_hits: bool = False,
) -> None:
    from harness.engine.case.campaign import (
        Campaign,
        CampaignResult,
        CaseSpec,
        default_cases,
        discover_boundaries,
        finish_campaign,
        validate_cases,
    )
    from harness.engine.case.parallel import run_cases
    from harness.engine.case.parallel import shard as shard_cases
    from harness.engine.plan import scenario as scenario_mod
    from harness.engine.search import recovery
    from harness.engine.search.determinism import rerun_sample
    from harness.engine.search.sweep import DEFAULT_SAMPLE, sweep

    settings: Any = None
    workdir: Path | None = None
    done: list[Any] = []
    progress = _progress.Progress(mode or "run")

    def on_case(case: Any) -> None:
        done.append(case)
        progress.advance(case.verdict.value)
        with progress.above():
            print_case(case, progress.counter())

    try:
        _cli_values.report_dir(report_dir)
        _scratch.check_settings()  # bad scratch settings are refused before any case
        scenario = scenario_mod.load(scenario_mod.resolve_path(scenario_name))
        settings = _settings(scenario, seed=seed, db_url=db_url, keep=keep, set_words=set_words)
        mode = mode or scenario.mode
        progress.label = mode
        if only or mode == "list":  # known now: the header says where they run
            settings.cases = [CaseSpec.parse(c) for c in only] if only else list(scenario.cases)
        click.echo(
            f"{verb or ('run' if only else mode)} {scenario.name} · system "
            f"{settings.system.name} · seed "
            f"{settings.seed} · db {settings.database_shown}"
        )
        cases: list[CaseSpec]
        if only:
            cases = [CaseSpec.parse(c) for c in only]
            mode = "list"
        elif mode == "list":
            cases = list(scenario.cases)
        else:
            if mode != "sweep" and settings.system.discover:  # its points: from a dry run
                system, dry = discover_boundaries(settings)
                settings.system = system
                click.echo(f"dry run reached: {', '.join(system.boundaries) or 'no boundary'}")
                _echo.echo_discovered(
                    system.boundaries, dry.reached, dry.targets, dry.unnamed, dry.callers
                )
            cases = default_cases(settings.system, [p.name for p in settings.provider_specs()])
        settings.jobs = jobs
        shard_info: dict[str, Any] | None = None
        if shard == "auto":  # the CI engine says which job of how many this is
            from harness.engine.plan import _ci_shard

            shard, source = _ci_shard.detect()
            click.echo(f"shard {shard} (--shard auto: {source})")
        if shard is not None:
            shard_cases(cases, shard)  # checks the i/n spelling, whatever the mode
            index, count = (int(part) for part in shard.split("/"))
            # what `crash-harness report merge` needs to put the shards back together (a
            # sweep knows its plan only after its dry run: filled in below)
            shard_info = {"spec": f"{index}/{count}", "index": index, "count": count}
            if mode != "sweep":
                shard_info["plan"] = [c.id for c in cases]
                cases = shard_cases(cases, shard)
        if mode != "sweep":
            # every case refused before any runs (a far-side point of no provider too)
            validate_cases(settings.system, cases, [p.name for p in settings.provider_specs()])
            settings.cases = cases
            progress.plan(len(cases))
        progress.draw()  # "0/M" (a sweep: the label alone until its dry run is done)
        with Campaign(settings) as campaign:
            workdir = campaign.workdir
            result = CampaignResult(settings=settings, workdir=campaign.workdir)
            campaign.describe_start(result)
            if campaign.warmth is not None:
                with progress.above():
                    click.echo(campaign.warmth.sentence())
            if shard_info is not None:
                result.extra["shard"] = shard_info
            if mode == "sweep":
                results, coverage = sweep(
                    campaign,
                    depth=depth or scenario.depth,
                    on_case=on_case,
                    on_plan=progress.plan,
                    jobs=jobs,
                    shard=None if shard_info is None else (index, count),
                    on_dry_run=lambda dry: _list_discovered(progress, campaign, dry),
                    sample=next(
                        n for n in (hit_sample, scenario.sample, DEFAULT_SAMPLE) if n is not None
                    ),
                    all_hits=all_hits or (hit_sample is None and scenario.all_hits),
                )
                result.cases.extend(results)
                result.extra["sweep"] = coverage.to_json()
                if shard_info is not None:
                    shard_info["plan"] = coverage.plan
                settings.cases = [r.spec for r in results]  # the report's plan is what ran
            else:
                result.cases.extend(run_cases(campaign, cases, jobs=jobs, on_case=on_case))
                if mode == "certify" and shard_info is None:
                    # the seeded sample of crashes during recovery every certify runs
                    more, record = recovery.run_sample(
                        campaign,
                        result.cases,
                        on_plan=lambda ids: progress.plan(len(ids)),
                        on_case=on_case,
                    )
                    result.cases.extend(more)
                    settings.cases = [*cases, *(r.spec for r in more)]
                    result.extra["recovery_sample"] = record
            if determinism:
                sample = rerun_sample(campaign, result.cases, size=determinism, seed=settings.seed)
                result.extra["determinism"] = sample
        result = finish_campaign(result, campaign)
    except BadInputError as exc:
        progress.close()
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except KeyboardInterrupt as exc:
        stop_interrupted(exc, settings=settings, done=done, workdir=workdir, report_dir=report_dir)
    progress.close()
    from harness import reports
    from harness.cli._echo import echo_gaps
    from harness.reports._common import recovery_sentence

    outcome, data = judge_report(scenario, result, mode)
    if "sweep" in result.extra:
        cov = result.extra["sweep"]
        where = f" of shard {shard}" if shard is not None else ""
        click.echo(
            f"sweep coverage{where}: {cov['pairs_covered']}/{cov['pairs_expected']}"
            f" (boundary, hit) pairs; depth-2 cases {cov['depth2_fired']}/{cov['depth2_planned']}"
        )
        if cov.get("hits_left_out"):
            from harness.engine.search.sweep import describe_hits

            click.echo(f"  discovered points: {describe_hits(cov)}")
        if cov.get("unnamed_seen"):
            seen = sum(cov["unnamed_seen"].values())
            click.echo(
                f"  and {seen} send(s)/commit(s) the dry run saw but could not name:"
                " no crash point, never crashed (listed after the dry run)"
            )
    said = recovery_sentence(data)
    if said:
        click.echo(said)
    if result.extra.get("determinism"):  # an empty sample (no passing case) says nothing
        sample = result.extra["determinism"]
        agree = sum(1 for s in sample if s["agree"])
        click.echo(f"determinism sample: {agree}/{len(sample)} reruns agree")
        for entry in sample:
            if not entry["agree"]:
                why = entry.get("differs") or f"{entry['first']} then {entry['rerun']}"
                click.echo(f"  rerun of {entry['case']} differs: {why}")
                for trace in entry.get("traces") or ():
                    click.echo(f"    trace: {trace}")
    echo_gaps(outcome.gaps)
    settle_workdir(result, data, outcome, keep=keep)
    took = f" ({len(result.cases)} case(s) in {_progress.duration(progress.elapsed())})"
    _style.echo(_style.paint(outcome.message + took, _style.status_colour(outcome.status)))
    paths = reports.write_all(data, report_dir)
    click.echo(f"report: {', '.join(str(p) for p in paths.values())}")
    sys.exit(outcome.status)


def _list_discovered(progress: _progress.Progress, campaign: Any, dry: Any) -> None:
    """What a discovering system's dry run found, before the sweep crashes it there."""
    from harness.cli._echo import echo_discovered

    system = campaign.settings.system
    if system.discover:
        with progress.above():
            echo_discovered(system.boundaries, dry.reached, dry.targets, dry.unnamed, dry.callers)


_common: list[Callable[[Any], Any]] = [
    click.argument("scenario_name", metavar="SCENARIO", shell_complete=_complete.complete_scenario),
    click.option(
        "--seed", type=_cli_values.SEED, default=None, help="Workload seed (default: the file's)."
    ),
    click.option("--db", "db_url", default=None, help="Ledger database URL (default SQLite)."),
    click.option(
        "--report-dir",
        type=click.Path(path_type=Path),
        default=Path("reports"),
        show_default=True,
        help="Where report.json, report.md, report.xml (JUnit) and report.html are written.",
    ),
    click.option("--keep-workdir", "keep", is_flag=True, help="Keep ledgers, traces and logs."),
    click.option(
        "--jobs",
        type=click.IntRange(1, 64),
        default=1,
        show_default=True,
        help="Run cases on this many cores (each job has its own provider).",
    ),
    click.option(
        "--shard",
        default=None,
        help="Run only shard i/n of the cases (CI split); auto: read i and n from the CI"
        " engine (GitLab parallel, CircleCI, Buildkite, a Kubernetes Indexed Job, or"
        " CRASH_HARNESS_SHARD=i/n).",
    ),
    click.option(
        "--set",
        "set_words",
        multiple=True,
        metavar="NAME=JSON",
        help="A setting on top of the file's, checked as the file's are (runs=1,"
        " provider_window_s=0, ...); replay lines restate them.",
    ),
    _style.color_option(),
]


def _with_common(fn: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in reversed(_common):
        fn = decorator(fn)
    return fn


_determinism = click.option(
    "--determinism",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Rerun this many passing cases with the same seed; all must agree.",
)


@click.command("run")
@_with_common
@click.option(
    "--case",
    "only",
    multiple=True,
    help="Run only these case ids (repeatable).",
    shell_complete=_complete.complete_case,
)
@_determinism
def run_cmd(**options: Any) -> None:
    """Run a scenario file (a path, or the name of a built-in) as it is written.

    SCENARIO is a built-in scenario's name (`crash-harness scenarios list`) or the path of a
    scenario file (TOML).
    """
    _execute(**options)


@click.command("sweep")
@_with_common
@click.option("--depth", type=click.IntRange(1, 2), default=None, help="2: crash recoveries too.")
@click.option(
    "--case",
    "only",
    multiple=True,
    help="Run only these case ids of the sweep (repeatable), as certify --case does.",
    shell_complete=_complete.complete_case,
)
@click.option(
    "--sample",
    "hit_sample",
    type=click.IntRange(0, None),
    default=None,
    help="Hits of a discovered point crashed beyond the first of each class, drawn from"
    " the seed.  [default: 10]",
)
@click.option(
    "--all-hits",
    is_flag=True,
    help="Crash every hit of every discovered point, not one per class and a sample.",
)
@_determinism
def sweep_cmd(**options: Any) -> None:
    """Dry-run a scenario, then crash at every (boundary, hit) it reached.

    SCENARIO is a built-in scenario's name (`crash-harness scenarios list`) or the path of a
    scenario file (TOML). Hits of a discovered point that went the same way (the same
    library path below the worker's line, the same caller, rows written or none) are one
    class: the sweep crashes the first of each class and a seeded sample of the others
    (--sample), or every hit (--all-hits). With --case, only those cases run (a case of a
    sweep's report, to rerun a few without the whole sweep); --depth does not apply then.
    """
    if options.get("only") and options.get("depth"):
        click.echo("error: --depth plans a sweep; --case names its cases: give one", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    if options.get("all_hits") and options.get("hit_sample") is not None:
        click.echo("error: --all-hits crashes every hit; --sample chooses some: give one", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    _execute(mode="sweep", verb="sweep" if options.get("only") else None, **options)


@click.command("replay")
@_with_common
@click.option(
    "--case",
    "only",
    multiple=True,
    required=True,
    help="The case id to rerun.",
    shell_complete=_complete.complete_case,
)
def replay_cmd(**options: Any) -> None:
    """Rerun one case (or schedule) of a scenario exactly, from its seed and id.

    SCENARIO is a built-in scenario's name (`crash-harness scenarios list`) or the path of a
    scenario file (TOML). Its reports go to reports/replay unless --report-dir says where:
    a replay never writes over the reports of the run it replays.
    """
    source = click.get_current_context().get_parameter_source("report_dir")
    if source is click.core.ParameterSource.DEFAULT:
        options["report_dir"] = Path(options["report_dir"]) / "replay"
    _execute(verb="replay", **options)


@click.group("scenarios")
def scenarios_group() -> None:
    """List the built-in scenarios or check scenario files."""


@scenarios_group.command("list")
def scenarios_list() -> None:
    """List the built-in scenarios with their descriptions."""
    from harness.engine.plan import scenario as scenario_mod

    for path in scenario_mod.builtin_paths():
        sc = scenario_mod.load(path)
        expect = f"expects {sc.violation}" if sc.violation else "must hold"
        click.echo(f"{path.stem:<40} {sc.mode:<8} {expect:<34} {sc.description}")


@scenarios_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def scenarios_check(files: tuple[Path, ...]) -> None:
    """Validate scenario files: syntax, keys, systems, faults and boundaries.

    FILES are the scenario files (TOML) to check; each gets one line, ok or its error.
    """
    from harness.engine.plan import scenario as scenario_mod

    bad = 0
    for path in files:
        try:
            scenario_mod.load(path).checked_system()
            click.echo(f"ok    {path}")
        except BadInputError as exc:
            bad += 1
            click.echo(f"error {exc}", err=True)
    sys.exit(ExitStatus.BAD_INPUT if bad else ExitStatus.PASSED)


@click.command("explore")
@_with_common
@click.option(
    "--budget",
    type=click.IntRange(1),
    default=200,
    show_default=True,
    help="How many schedules Hypothesis may try.",
)
@click.option(
    "--max-steps",
    type=click.IntRange(1, 6),
    default=3,
    show_default=True,
    help="The most fault steps one drawn schedule may hold (crash, pause, jump, ...).",
)
@click.option(
    "--examples-dir",
    type=click.Path(path_type=Path),
    default=Path(".hypothesis/crash-harness"),
    show_default=True,
    help="Hypothesis example database: failures found are tried first next time.",
)
@click.option(
    "--examples-redis",
    "examples_redis",
    default=None,
    metavar="URL",
    help="Share the example database through Redis (redis://HOST:PORT/DB) instead: every"
    " shard of a CI matrix replays first what any shard found.",
)
def explore_cmd(
    *,
    scenario_name: str,
    seed: int | None,
    db_url: str | None,
    report_dir: Path,
    keep: bool,
    jobs: int,
    shard: str | None,
    budget: int,
    max_steps: int,
    examples_dir: Path,
    examples_redis: str | None = None,
    set_words: tuple[str, ...] = (),
) -> None:
    """Let Hypothesis search fault schedules against real processes and shrink any failure.

    SCENARIO is a built-in scenario's name (`crash-harness scenarios list`) or the path of a
    scenario file (TOML).
    """
    import time

    from harness import reports
    from harness.engine.case.campaign import Campaign, CampaignResult, finish_campaign
    from harness.engine.plan import scenario as scenario_mod
    from harness.engine.search.explore import coverage as explore_coverage
    from harness.engine.search.explore import explore, shard_seed

    settings: Any = None
    workdir: Path | None = None
    done: list[Any] = []
    progress = _progress.Progress("explore")
    heartbeat = _progress.Heartbeat(progress)
    try:
        shard_index = 1
        if shard is not None:
            from harness.engine.case.parallel import shard as shard_cases

            shard_cases([], shard)  # checks the i/n spelling
            shard_index = int(shard.split("/")[0])
        if examples_redis is not None and not examples_redis.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise BadInputError(
                f"--examples-redis: expected a redis://HOST:PORT/DB URL, got {examples_redis!r}"
            )
        _cli_values.report_dir(report_dir)
        _scratch.check_settings()
        scenario = scenario_mod.load(scenario_mod.resolve_path(scenario_name))
        settings = _settings(scenario, seed=seed, db_url=db_url, keep=keep, set_words=set_words)
        click.echo(
            f"explore {scenario.name} · system {settings.system.name} · seed "
            f"{settings.seed} · budget {budget}"
        )
        progress.draw()
        started = time.perf_counter()

        def seen(case: Any) -> None:
            done.append(case)
            with progress.above():
                heartbeat.seen(case)  # a heartbeat line, every few seconds, off a terminal
                if case.verdict is not Status.PASS:
                    print_case(case)

        with Campaign(settings) as campaign:
            workdir = campaign.workdir
            result = CampaignResult(settings=settings, workdir=campaign.workdir)
            campaign.describe_start(result)
            found = explore(
                campaign,
                budget=budget,
                seed=shard_seed(settings.seed, shard_index),
                database_dir=examples_redis or examples_dir / scenario.name,
                max_steps=max_steps,
                on_case=seen,
                jobs=jobs,
            )
            result.cases.extend(found.tried)
            settings.cases = [r.spec for r in found.tried]  # the report's plan is what ran
        result = finish_campaign(result, campaign)
    except BadInputError as exc:
        progress.close()
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except KeyboardInterrupt as exc:
        stop_interrupted(exc, settings=settings, done=done, workdir=workdir, report_dir=report_dir)
    progress.close()
    elapsed = time.perf_counter() - started
    runs = sum(len(r.runs) or 1 for r in found.tried)
    rate = runs / elapsed if elapsed else 0.0
    reach = explore_coverage(found.tried, settings.system.boundaries)
    result.extra["explore"] = {
        **({"shard": shard} if shard is not None else {}),
        "budget": budget,
        "schedules_run": runs,
        "schedules_per_second": round(rate, 2),
        "failures_seen": found.failures_seen,
        "minimal": found.minimal.spec.id if found.minimal else None,
        "flaky": [
            {"case": f.spec.id, "runs": [r.verdict.value for r in f.runs], "replay": f.replay}
            for f in found.flaky
        ],
        **reach,
    }
    outcome, data = judge_report(scenario, result, "explore")
    settle_workdir(result, data, outcome, keep=keep)
    click.echo(f"{runs} schedules in {elapsed:.1f}s ({rate:.1f}/s)")
    if reach["boundaries_unreached"]:
        click.echo("never reached: " + ", ".join(reach["boundaries_unreached"]))
    if reach["boundaries_never_faulted"]:
        click.echo("reached, no fault landed: " + ", ".join(reach["boundaries_never_faulted"]))
    for f in found.flaky:
        said = ", then ".join(r.verdict.value for r in f.runs)
        click.echo(f"flaky schedule: {f.spec.id}  (runs: {said})")
        click.echo(f"replay: {f.replay}")
    if found.minimal is not None:
        broken = [n for n, r in found.minimal.invariants.items() if r.status is Status.FAIL]
        click.echo(f"smallest failing schedule: {found.minimal.spec.id}  ({', '.join(broken)})")
        click.echo(f"replay: {found.minimal.replay}")
    elif not found.flaky:
        click.echo("no failing schedule found")
    _style.echo(_style.paint(outcome.message, _style.status_colour(outcome.status)))
    paths = reports.write_all(data, report_dir)
    click.echo(f"report: {', '.join(str(p) for p in paths.values())}")
    sys.exit(outcome.status)


COMMANDS = [run_cmd, sweep_cmd, replay_cmd, explore_cmd, scenarios_group]
