"""The ``crash-harness`` command.

Exit statuses (``harness.errors.ExitStatus``): 0 every invariant holds; 1 a violation was
found (or a documented boundary was never reached); 2 bad input; 3 inconclusive (a checker
could not decide, a worker died on its own or hung); 4 the harness itself failed.
"""

from __future__ import annotations

import secrets
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from harness import __version__
from harness.cli import _complete, _style
from harness.cli import _values as _cli_values
from harness.cli._echo import MARKS as MARKS  # re-exported: commands used to import them from here
from harness.cli._echo import counted as counted
from harness.cli._echo import echo_discovered, echo_gaps, echo_kept
from harness.cli._echo import format_bytes as format_bytes
from harness.cli._echo import mark_of as mark_of
from harness.engine.store import _room
from harness.errors import BadInputError, ExitStatus, interruption
from harness.names import BOUNDARIES

#: commands that live in their own modules, imported only when asked for (``--version`` and
#: ``--help`` then import none of them): name -> (module, attribute, the help listing's line,
#: as click shortens it for an 80-column listing)
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "clean": (
        "harness.cli.clean",
        "clean_cmd",
        "Remove work dirs, cgroups, case schemas and databases and...",
    ),
    "completion": (
        "harness.cli._complete",
        "completion_cmd",
        "Print the completion script for SHELL: bash, zsh or fish.",
    ),
    "explore": (
        "harness.cli.scenario",
        "explore_cmd",
        "Let Hypothesis search fault schedules against real...",
    ),
    "ledger": (
        "harness.cli.ledger",
        "ledger",
        "Inspect a delivery ledger and settle the items waiting for...",
    ),
    "mutants": (
        "harness.cli.mutants",
        "mutants",
        "Run every mutant and the reference; print which invariants...",
    ),
    "providers": (
        "fake_providers._cli",
        "providers",
        "Run the fake providers on their own (payments, orders,...",
    ),
    "replay": (
        "harness.cli.scenario",
        "replay_cmd",
        "Rerun one case (or schedule) of a scenario exactly, from...",
    ),
    "report": (
        "harness.cli.report",
        "report_group",
        "Render a saved report in another format, or merge shard...",
    ),
    "run": (
        "harness.cli.scenario",
        "run_cmd",
        "Run a scenario file (a path, or the name of a built-in) as...",
    ),
    "scenarios": (
        "harness.cli.scenario",
        "scenarios_group",
        "List the built-in scenarios or check scenario files.",
    ),
    "sweep": (
        "harness.cli.scenario",
        "sweep_cmd",
        "Dry-run a scenario, then crash at every (boundary, hit) it...",
    ),
}


class _LazyGroup(click.Group):
    """A group whose sub-commands in ``LAZY_COMMANDS`` are imported on first use.

    The help listing shows each one's stored line instead of importing it (a test keeps the
    stored lines equal to the commands' own)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            import importlib

            module, attr, _ = LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command), cmd_name
            assert command.name == cmd_name, cmd_name
            self.add_command(command)
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            give_version(command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Every command ends in a status CI can read: a setup error of the user's is one
        line and exit 2 wherever it is raised, and an exception nobody expected is the
        harness's own failure (exit 4), never the uncaught-exception exit 1 that means
        "violation found"; a write the machine refused (disk full, read-only, over quota,
        failing) is one line and the harness-error status, never a traceback."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BadInputError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(ExitStatus.BAD_INPUT)
        except OSError as exc:
            cannot = _room.cannot_write(exc)
            if cannot is None:
                click.echo("internal error in crash-harness:\n" + traceback.format_exc(), err=True)
                sys.exit(ExitStatus.INTERNAL_ERROR)
            click.echo(f"error: {cannot}", err=True)
            sys.exit(ExitStatus.INTERNAL_ERROR)
        except Exception:
            click.echo("internal error in crash-harness:\n" + traceback.format_exc(), err=True)
            sys.exit(ExitStatus.INTERNAL_ERROR)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))  # click's own rule
        rows = []
        for name in names:
            if name in LAZY_COMMANDS and name not in self.commands:
                rows.append((name, LAZY_COMMANDS[name][2]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(
    ctx: click.Context,
    param: click.Parameter,
    value: bool,  # noqa: FBT001 - click passes it positionally
) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"crash-harness, version {__version__}")
        ctx.exit()


def give_version(command: click.Command) -> None:
    """Give ``command`` and every sub-command under it a ``--version`` (as the top level has):
    a user pasting ``crash-harness certify ... --version`` into a bug report gets the version,
    not "no such option". Done where commands are looked up, so lazy ones get it too."""
    if not any(p.name == "version" for p in command.params):
        command.params.append(
            click.Option(
                ["--version"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_print_version,
                help="Show the version and exit.",
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            give_version(sub)


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    from harness.errors import Terminated

    raise Terminated()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="crash-harness")
@_style.color_option(default="auto")
def main() -> None:
    """Crash-inject a delivery worker and prove it never sends twice or loses a message."""
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    # Ctrl-C always stops a run cleanly (workers and providers killed, a partial report),
    # even when the parent started us with SIGINT ignored (a test runner's worker, a CI
    # wrapper, `cmd &` in a script): otherwise only SIGKILL would, leaving no report.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@main.command()
@click.option(
    "--system",
    "system_name",
    default="reference",
    show_default=True,
    help="'reference', 'mutant:NAME', an importable 'module:attr' System, or 'cmd:COMMAND'.",
    shell_complete=_complete.complete_system,
)
@click.option(
    "--system-cmd",
    "system_cmd",
    default=None,
    metavar="COMMAND",
    help="A worker that is a program, e.g. 'python -m myapp.worker': exec'd with the case's"
    " settings in its environment (same as --system 'cmd:COMMAND').",
)
@click.option(
    "--crash-scope",
    type=click.Choice(["worker", "process", "parent"]),
    default="worker",
    show_default=True,
    help="What a crash kills: every process of the worker, only the one at the boundary, or"
    " the worker's first process while the child at the boundary goes on.",
)
@click.option(
    "--db",
    "db_url",
    default=None,
    help="Ledger database URL (default: a fresh SQLite file per case in a temp dir).",
)
@click.option(
    "--seed", type=_cli_values.SEED, default=None, help="Workload seed (default: random, printed)."
)
@click.option(
    "--case",
    "case_ids",
    multiple=True,
    help="Run only this case id (repeatable), e.g. 'crash@after_claim#1'.",
    shell_complete=_complete.complete_case,
)
@click.option(
    "--report-dir",
    type=click.Path(path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Where report.json, report.md, report.xml (JUnit) and report.html are written.",
)
@click.option(
    "--worker-deadline",
    type=_cli_values.WORKER_DEADLINE,
    default=60.0,
    show_default=True,
    help="Seconds one worker may run before it is declared hung.",
)
@click.option("--keep-workdir", is_flag=True, help="Keep ledgers, traces and worker logs.")
@click.option(
    "--resume",
    "resume_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Finish a partial report.json: run only the planned cases it lacks, write the merged"
    " report (its system, seed and database are reused).",
)
@click.option(
    "--set",
    "set_words",
    multiple=True,
    metavar="NAME=JSON",
    help="A campaign setting on top of the defaults, checked as a scenario file's would be"
    " (runs=1, provider_window_s=0, 'worker_overrides={\"lease_s\": 0.5}'); replay lines"
    " restate them.",
)
@click.option(
    "--discover/--no-discover",
    "discover",
    default=None,
    help="Crash at every send and commit the worker's Python processes make, found without a"
    " line in the worker (on by default for a program that declares no boundaries).",
)
@_style.color_option()
def certify(
    *,
    discover: bool | None = None,
    set_words: tuple[str, ...] = (),
    system_name: str,
    system_cmd: str | None,
    crash_scope: str,
    db_url: str | None,
    seed: int | None,
    case_ids: tuple[str, ...],
    report_dir: Path,
    worker_deadline: float,
    keep_workdir: bool,
    resume_path: Path | None,
) -> None:
    """Crash the system once at every boundary (plus a baseline), then a seeded sample of
    three crashes during recovery (depth 2), and check every invariant.

    The reports are rewritten after every case, so an interrupted campaign leaves a valid
    partial report that ``--resume`` continues.
    """
    import contextlib
    import shutil
    from dataclasses import replace

    from click.core import ParameterSource

    from harness import systems
    from harness.cli import _progress
    from harness.cli.scenario import print_case
    from harness.engine.case.campaign import (
        CampaignSettings,
        CaseResult,
        CaseSpec,
        default_cases,
        discover_boundaries,
        validate_cases,
    )
    from harness.engine.plan import _overrides
    from harness.engine.results import DEFAULT_WORKER_DEADLINE_S
    from harness.engine.store import _db, _scratch
    from harness.invariants import Status
    from harness.reports._contract import determinism_of
    from harness.reports._live import LiveReport, ResumePlan, plan_resume

    ctx = click.get_current_context()
    if system_cmd is not None:
        if ctx.get_parameter_source("system_name") is not ParameterSource.DEFAULT:
            raise click.UsageError("give --system or --system-cmd, not both")
        system_name = f"cmd:{system_cmd}"
    live: LiveReport | None = None
    resumed: ResumePlan | None = None
    progress = _progress.Progress("certify")
    try:
        _cli_values.report_dir(report_dir)
        _scratch.check_settings()  # bad scratch settings are refused before any case
        if resume_path is not None:
            given_system = ctx.get_parameter_source("system_name") is not ParameterSource.DEFAULT
            resumed = plan_resume(
                resume_path,
                system=system_name if given_system else None,
                seed=seed,
                db_url=db_url,
                case_ids=case_ids,
            )
            system_name, seed, db_url = resumed.system, resumed.seed, resumed.db_url
            if ctx.get_parameter_source("report_dir") is ParameterSource.DEFAULT:
                report_dir = resume_path.parent
        system = systems.resolve(system_name)
        url = _db.normalise_url(db_url) if db_url else None
        cases: list[CaseSpec] | None
        if resumed is not None:
            cases = [CaseSpec.parse(c) for c in resumed.remaining]  # may be none left
        else:
            cases = [CaseSpec.parse(c) for c in case_ids] or None
        if set_words and resumed is not None:
            raise BadInputError(
                "--set with --resume: a resumed campaign reuses the partial report's settings"
            )
        given = dict(_overrides.parse(word) for word in set_words)
        # a replay line restates every setting that changes what runs
        if crash_scope != "worker":
            given.setdefault("crash_scope", crash_scope)
        if worker_deadline != DEFAULT_WORKER_DEADLINE_S:  # as --set restates it
            given.setdefault("worker_deadline_s", worker_deadline)
        fields: dict[str, object] = {
            "worker_deadline_s": worker_deadline,
            "crash_scope": crash_scope,
        }
        settings = CampaignSettings(
            system=system,
            seed=seed if seed is not None else secrets.randbelow(2**31),
            db_url=url,
            cases=cases,
            keep_workdir=keep_workdir,
            replay_overrides=given,
            **{**fields, **given},
        )
        if discover is not None and discover != system.discover:
            system = replace(system, discover=discover)
            settings.system = system
            # a replay of a discovered point must discover it again
            settings.replay_prefix = [
                *("crash-harness", "certify", "--system", systems.importable_name(system)),
                "--discover" if discover else "--no-discover",
            ]
        if system.discover or not system.boundaries:  # crash where its dry run really went
            click.echo(f"dry run of {system.name}: finding the boundaries it reaches")
            system, dry = discover_boundaries(settings)
            settings.system = system
            click.echo(f"dry run reached: {', '.join(system.boundaries) or 'no boundary'}")
            echo_discovered(system.boundaries, dry.reached, dry.targets, dry.unnamed, dry.callers)
            if not system.boundaries:
                hooked = " and no send or commit of its Python processes" if system.discover else ""
                click.echo(
                    f"coverage gap: the program reached no boundary(){hooked} in its dry run,"
                    " so no crash can be planned; add boundary() calls where a restart must"
                    " survive"
                )
                sys.exit(ExitStatus.VIOLATION)
        names = [spec.name for spec in settings.provider_specs()]
        planned = cases if cases is not None else default_cases(system, names)
        validate_cases(system, planned, names)
        progress.plan(len(planned))
        click.echo(f"certify {system.name} · seed {settings.seed} · db {settings.database_shown}")
        if resumed is not None:
            plan, full = resumed.plan, resumed.full
            click.echo(
                f"resuming {resume_path}: {len(resumed.previous)} of {len(plan)} case(s) done,"
                f" running {len(planned)}"
            )
        else:
            plan, full = [c.id for c in planned], cases is None
        progress.draw()  # "0/M" while the provider starts and the first case runs
        # The CLI owns the work dir so each case's trace can be read for the report while the
        # campaign runs; it is dropped below on the campaign's own rule (all passed, not kept).
        settings.workdir = _scratch.make_workdir("crash-harness-")
        live = LiveReport(
            settings,
            report_dir,
            plan=plan,
            full=full,
            previous=resumed.previous if resumed is not None else (),
            started_at=resumed.started_at if resumed is not None else None,
            workdir=settings.workdir,
            determinism=resumed.determinism if resumed is not None else (),
        )

        def show(case: CaseResult) -> None:
            assert live is not None
            try:
                live.record(case)  # the partial report is on disk before the line is printed
            except OSError as exc:  # the line still says how the case went; the end says why
                if _room.cannot_write(exc) is None:  # no report could be written
                    raise
            progress.advance(case.verdict.value)
            with progress.above():
                print_case(case, progress.counter(), width=38)  # one look on every route

        def plan_more(ids: list[str]) -> None:
            assert live is not None
            progress.plan(len(ids))
            live.plan.extend(ids)  # a resume runs what is left of them

        all_passed = True
        if cases is None or cases:
            result = _run_certify(
                settings, planned, sample=cases is None, plan_more=plan_more, on_case=show
            )
            all_passed = all(c.verdict is Status.PASS for c in result.cases)
            live.determinism += determinism_of(result)
            if "recovery_sample" in result.extra:
                live.extra["recovery_sample"] = result.extra["recovery_sample"]
        if all_passed and not keep_workdir:
            shutil.rmtree(settings.workdir, ignore_errors=True)
            live.workdir = None
        data = live.write(partial=False)
    except BadInputError as exc:
        progress.close()
        if live is not None and live.workdir is not None:
            with contextlib.suppress(OSError):
                live.workdir.rmdir()  # only if the campaign never got to use it
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except KeyboardInterrupt as exc:
        progress.close()
        why, status = interruption(exc)
        click.echo(f"{why}; every worker and provider was stopped", err=True)
        if live is not None:
            _write_partial(live)
        sys.exit(status)
    except Exception as exc:
        progress.close()
        cannot = _room.cannot_write(exc)
        if cannot is not None:  # the machine's failure: one line, never a traceback
            click.echo(f"error: {cannot}", err=True)
            sys.exit(ExitStatus.INTERNAL_ERROR)
        click.echo("internal error in crash-harness:\n" + traceback.format_exc(), err=True)
        sys.exit(ExitStatus.INTERNAL_ERROR)

    from harness.invariants import looks
    from harness.reports._common import recovery_sentence
    from harness.reports.outcome import Expectation, judge

    paths = live.paths
    summary = data["summary"]
    outcome = judge(data, Expectation())
    progress.close()
    _style.echo(
        _style.paint(
            f"{summary['passed']} passed, {summary['failed']} failed, {summary['unknown']}"
            f" unknown, {summary['gaps']} not landed; boundaries covered"
            f" {summary['boundaries_covered']}/{summary['boundaries_documented']}"
            f" in {_progress.duration(progress.elapsed())}",
            _style.status_colour(outcome.status),
        )
    )
    if summary["invariants_violated"]:
        click.echo("invariants violated: " + ", ".join(summary["invariants_violated"]))
    click.echo("judged: " + looks.judged(data["cases"]).sentence())
    said = recovery_sentence(data)
    if said:
        click.echo(said)
    if summary["boundaries_uncovered"]:
        click.echo("never reached: " + ", ".join(summary["boundaries_uncovered"]))
    echo_gaps(outcome.gaps)
    if live.workdir is not None:
        echo_kept(live.workdir)
    click.echo(f"report: {paths['json']} and {paths['md']}")
    click.echo(f"also: {paths['junit']} (JUnit) and {paths['html']}")
    sys.exit(outcome.status)


def _run_certify(
    settings: Any,
    planned: list[Any],
    *,
    sample: bool,
    plan_more: Callable[[list[str]], None],
    on_case: Callable[[Any], None],
) -> Any:
    """The planned cases, then (for the default plan) the seeded sample of crashes during
    recovery (``harness.engine.search.recovery``), all against one provider and supervisor."""
    from harness.engine.case.campaign import Campaign, CampaignResult, finish_campaign
    from harness.engine.case.parallel import run_cases
    from harness.engine.search import recovery

    with Campaign(settings) as campaign:
        result = CampaignResult(settings=settings, workdir=campaign.workdir)
        campaign.describe_start(result)
        result.cases.extend(run_cases(campaign, planned, jobs=settings.jobs, on_case=on_case))
        if sample:
            more, record = recovery.run_sample(
                campaign, result.cases, on_plan=plan_more, on_case=on_case
            )
            result.cases.extend(more)
            result.extra["recovery_sample"] = record
    return finish_campaign(result, campaign)


@main.command()
def boundaries() -> None:
    """List the documented boundaries of the reference system."""
    for name, where in BOUNDARIES.items():
        click.echo(f"{name:<26} {where}")


def _write_partial(live: object) -> None:
    """After Ctrl-C: leave every report format consistent, marked partial, and say so."""
    from harness.reports._live import LiveReport

    assert isinstance(live, LiveReport)
    try:
        live.write(partial=True)
    except Exception as exc:  # never hide the interrupt behind a report problem
        click.echo(f"could not write the partial report: {exc}", err=True)
        return
    click.echo(
        f"partial report ({len(live.cases)} case(s)): {live.json_path}; continue it with:"
        f" crash-harness certify --resume {live.json_path}",
        err=True,
    )
