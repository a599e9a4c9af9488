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
from pathlib import Path
from types import FrameType

import click

from harness import __version__
from harness.errors import BadInputError, ExitStatus
from harness.invariants import Status
from harness.names import BOUNDARIES


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="crash-harness")
def main() -> None:
    """Crash-inject a delivery worker and prove it never sends twice or loses a message."""
    signal.signal(signal.SIGTERM, _raise_on_sigterm)


@main.command()
@click.option(
    "--system",
    "system_name",
    default="reference",
    show_default=True,
    help="'reference', 'mutant:NAME', or an importable 'module:attr' System.",
)
@click.option(
    "--db",
    "db_url",
    default=None,
    help="Ledger database URL (default: a fresh SQLite file per case in a temp dir).",
)
@click.option("--seed", type=int, default=None, help="Workload seed (default: random, printed).")
@click.option(
    "--case",
    "case_ids",
    multiple=True,
    help="Run only this case id (repeatable), e.g. 'crash@after_claim#1'.",
)
@click.option(
    "--report-dir",
    type=click.Path(path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Where report.json and report.md are written.",
)
@click.option(
    "--worker-deadline",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds one worker may run before it is declared hung.",
)
@click.option("--keep-workdir", is_flag=True, help="Keep ledgers, traces and worker logs.")
def certify(
    *,
    system_name: str,
    db_url: str | None,
    seed: int | None,
    case_ids: tuple[str, ...],
    report_dir: Path,
    worker_deadline: float,
    keep_workdir: bool,
) -> None:
    """Crash the system once at every boundary (plus a baseline) and check every invariant."""
    from harness import _db, report, systems
    from harness.campaign import CampaignSettings, CaseResult, CaseSpec, run_campaign

    try:
        system = systems.resolve(system_name)
        url = _db.normalise_url(db_url) if db_url else None
        cases = [CaseSpec.parse(c) for c in case_ids] or None
        settings = CampaignSettings(
            system=system,
            seed=seed if seed is not None else secrets.randbelow(2**31),
            db_url=url,
            cases=cases,
            worker_deadline_s=worker_deadline,
            keep_workdir=keep_workdir,
        )
        click.echo(
            f"certify {system.name} · seed {settings.seed} · "
            f"db {'postgresql' if url and url.startswith('postgresql') else 'sqlite'}"
        )

        def show(case: CaseResult) -> None:
            mark = {"pass": "ok  ", "fail": "FAIL", "unknown": "??? "}[case.verdict.value]
            failed = [n for n, r in case.invariants.items() if r.status is not Status.PASS]
            extra = f"  {', '.join(failed)}" if failed else ""
            click.echo(f"  {mark} {case.spec.id:<38} {case.duration_s:6.2f}s{extra}")
            for note in case.notes:
                click.echo(f"       note: {note}")
            if case.verdict is not Status.PASS:
                for w in case.workers:
                    if w.stack_dump or (w.outcome_is_anomaly and w.stderr_tail):
                        click.echo(_indent(w.stack_dump or w.stderr_tail), err=True)
                click.echo(f"       replay: {case.replay}")

        result = run_campaign(settings, on_case=show)
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("interrupted; every worker and provider was stopped", err=True)
        sys.exit(130)
    except Exception:
        click.echo("internal error in crash-harness:\n" + traceback.format_exc(), err=True)
        sys.exit(ExitStatus.INTERNAL_ERROR)

    paths = report.write_reports(result, report_dir)
    summary = report.summarise(result)
    click.echo(
        f"{summary['passed']} passed, {summary['failed']} failed, {summary['unknown']} unknown;"
        f" boundaries covered {summary['boundaries_covered']}/"
        f"{summary['boundaries_documented']}"
    )
    if summary["invariants_violated"]:
        click.echo("invariants violated: " + ", ".join(summary["invariants_violated"]))
    if summary["boundaries_uncovered"]:
        click.echo("never reached: " + ", ".join(summary["boundaries_uncovered"]))
    if result.workdir is not None:
        click.echo(f"work dir kept: {result.workdir}")
    click.echo(f"report: {paths['json']} and {paths['md']}")
    if summary["failed"] or summary["boundaries_uncovered"]:
        sys.exit(ExitStatus.VIOLATION)
    if summary["unknown"]:
        sys.exit(ExitStatus.INCONCLUSIVE)
    sys.exit(ExitStatus.PASSED)


@main.command()
def boundaries() -> None:
    """List the documented boundaries of the reference system."""
    for name, where in BOUNDARIES.items():
        click.echo(f"{name:<26} {where}")


def _indent(text: str) -> str:
    return "\n".join("       | " + line for line in text.rstrip().splitlines()[-40:])


# -- further command groups, each in its own module, registered here ----------------------
