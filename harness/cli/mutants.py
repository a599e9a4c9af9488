"""``crash-harness mutants``: run the catalogue of broken workers and print the detection matrix.

A testing tool is only as good as the bugs it catches. This command runs the reference and
every mutant (each one real mistake) through the same certify campaign, plus, for a mutant
that only a particular fault exposes, its catching scenario (which the reference runs too),
and shows which invariants fired for which system, whether each mutant was caught by the
invariant it is meant to break, and the mutation score. It exits 1 if a mutant escapes its
intended invariant or the reference is flagged by anything, 3 if the reference run was
inconclusive, else 0.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from harness.cli import _complete, _progress, _style
from harness.cli import _values as _cli_values
from harness.engine.store import _scratch
from harness.errors import BadInputError, ExitStatus, interruption

if TYPE_CHECKING:
    from harness.engine.case.campaign import CampaignSettings, CaseSpec
    from harness.systems import System

SCHEMA = "crash-harness/mutants/v1"


@dataclass
class SystemRow:
    """One line of the matrix: a system and what fired against it."""

    system: str
    intended: str | None
    #: invariant -> ids of the cases where it failed
    fired: dict[str, list[str]] = field(default_factory=dict)
    #: case id -> verdict
    verdicts: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def is_reference(self) -> bool:
        return self.intended is None

    @property
    def caught(self) -> bool:
        return self.intended is not None and self.intended in self.fired

    @property
    def inconclusive(self) -> bool:
        return any(v in ("unknown", "flaky") for v in self.verdicts.values())

    @property
    def gaps(self) -> list[str]:
        """Cases whose planned step did not land: the reference is not clean on those."""
        return [case for case, v in self.verdicts.items() if v == "gap"]

    def outcome(self) -> str:
        if self.is_reference:
            if self.fired:
                return "FLAGGED"
            if self.gaps:
                return "GAP"
            return "inconclusive" if self.inconclusive else "clean"
        return "caught" if self.caught else "ESCAPED"

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "intended": self.intended,
            "outcome": self.outcome(),
            "caught": self.caught if not self.is_reference else None,
            "fired": self.fired,
            "verdicts": self.verdicts,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass
class Matrix:
    seed: int
    database: str
    cases: list[str] | None
    invariants: list[str]
    rows: list[SystemRow] = field(default_factory=list)

    @property
    def reference(self) -> SystemRow:
        return next(r for r in self.rows if r.is_reference)

    @property
    def mutants(self) -> list[SystemRow]:
        return [r for r in self.rows if not r.is_reference]

    def score(self) -> tuple[int, int]:
        return sum(1 for r in self.mutants if r.caught), len(self.mutants)

    def exit_status(self) -> ExitStatus:
        caught, total = self.score()
        if caught < total or self.reference.fired or self.reference.gaps:
            return ExitStatus.VIOLATION
        if self.reference.inconclusive:
            return ExitStatus.INCONCLUSIVE
        return ExitStatus.PASSED

    def to_json(self) -> dict[str, Any]:
        caught, total = self.score()
        return {
            "schema": SCHEMA,
            "seed": self.seed,
            "database": self.database,
            "cases": self.cases if self.cases is not None else "default",
            "invariants": self.invariants,
            "reference": self.reference.to_json(),
            "mutants": [r.to_json() for r in self.mutants],
            "score": {"caught": caught, "total": total},
            "exit_status": int(self.exit_status()),
        }


def campaigns_for(
    system: System,
    *,
    seed: int,
    db_url: str | None,
    cases: list[CaseSpec] | None,
    worker_deadline_s: float,
    scenarios: list[str],
) -> list[tuple[str, CampaignSettings]]:
    """What to run for one system: the certify campaign (or ``cases``), then each scenario.

    A mutant that only one particular fault exposes names its ``catching_scenario``; the
    matrix runs it with that scenario's seed, provider, worker settings and cases, and runs
    the reference through the same scenarios, so both face the same faults.
    """
    from harness.cli.scenario import _settings
    from harness.engine.case.campaign import CampaignSettings, default_cases
    from harness.engine.plan import scenario as scenario_mod

    runs: list[tuple[str, CampaignSettings]] = [
        (
            "certify",
            CampaignSettings(
                system=system,
                seed=seed,
                db_url=db_url,
                cases=list(cases) if cases is not None else None,
                worker_deadline_s=worker_deadline_s,
            ),
        )
    ]
    for name in scenarios:
        scenario = scenario_mod.load(scenario_mod.resolve_path(name))
        # A scenario is tuned to its own seed (which send the provider drops, which races
        # line up); the matrix's seed only drives the certify campaign.
        own_seed = scenario.seed if scenario.seed is not None else seed
        settings = replace(
            _settings(scenario, seed=own_seed, db_url=db_url, keep=False), system=system
        )
        settings.cases = list(scenario.cases) if scenario.mode == "list" else default_cases(system)
        runs.append((name, settings))
    return runs


def run_matrix(
    *,
    names: list[str],
    seed: int,
    db_url: str | None,
    case_ids: list[str] | None,
    worker_deadline_s: float,
    workdir: Path,
    on_row: Callable[[SystemRow], None] | None = None,
) -> Matrix:
    """Run the reference and the named mutants, each through the certify campaign (or the
    given cases) plus the catching scenarios, under ``workdir`` (one folder per system)."""
    from harness import systems
    from harness.engine.case.campaign import CaseSpec, run_campaign
    from harness.invariants import CHECKERS, Status

    cases = [CaseSpec.parse(c) for c in case_ids] if case_ids else None
    matrix = Matrix(
        seed=seed,
        database="postgresql" if db_url and db_url.startswith("postgresql") else "sqlite",
        cases=[c.id for c in cases] if cases is not None else None,
        invariants=list(CHECKERS),
    )
    mutants = [systems.resolve(f"mutant:{n}") for n in names]
    catching = sorted({m.catching_scenario for m in mutants if m.catching_scenario})
    for system in [systems.resolve("reference"), *mutants]:
        started = time.monotonic()
        scenarios = catching if system.expected_violation is None else []
        if system.catching_scenario:
            scenarios = [system.catching_scenario]
        row = SystemRow(system=system.name, intended=system.expected_violation)
        plan = campaigns_for(
            system,
            seed=seed,
            db_url=db_url,
            cases=cases,
            worker_deadline_s=worker_deadline_s,
            scenarios=scenarios,
        )
        for label, settings in plan:
            settings.workdir = workdir / system.name.replace(":", "_") / label
            result = run_campaign(settings)
            for case in result.cases:
                case_id = case.spec.id if label == "certify" else f"{label}: {case.spec.id}"
                row.verdicts[case_id] = case.verdict.value
                for inv, check in case.invariants.items():
                    if check.status is Status.FAIL:
                        row.fired.setdefault(inv, []).append(case_id)
        row.duration_s = time.monotonic() - started
        matrix.rows.append(row)
        if on_row is not None:
            on_row(row)
    return matrix


# -- rendering --------------------------------------------------------------------------------


#: a matrix row's outcome -> the case verdict whose colour it takes
_ROW_VERDICTS = {
    "clean": "pass",
    "caught": "pass",
    "inconclusive": "unknown",
    "GAP": "gap",
    "FLAGGED": "fail",
    "ESCAPED": "fail",
}


def _cell(row: SystemRow, invariant: str) -> str:
    fired = invariant in row.fired
    if invariant == row.intended:
        return "[X]" if fired else "[ ]"
    return " X " if fired else " . "


def _headline(matrix: Matrix) -> str:
    return f"detection matrix · seed {matrix.seed} · db {matrix.database} · cases " + (
        ", ".join(matrix.cases) if matrix.cases is not None else "default (certify)"
    )


def _legend(matrix: Matrix) -> list[str]:
    lines = ["X fired in some case · [X] the intended invariant fired · [ ] intended, silent"]
    lines += [f"  {i:>2} {name}" for i, name in enumerate(matrix.invariants, 1)]
    return lines


def _score_line(matrix: Matrix) -> str:
    caught, total = matrix.score()
    pct = f" ({100 * caught / total:.0f}%)" if total else ""
    ref = matrix.reference
    ref_text = {
        "clean": "reference flagged by nothing",
        "inconclusive": "reference inconclusive (a case was unknown)",
        "FLAGGED": "REFERENCE FLAGGED by " + ", ".join(sorted(ref.fired)),
        "GAP": "REFERENCE NOT FULLY EXERCISED: planned steps did not land in "
        + ", ".join(ref.gaps),
    }[ref.outcome()]
    escaped = [r.system for r in matrix.mutants if not r.caught]
    text = f"mutation score: {caught}/{total} caught{pct}; {ref_text}"
    if escaped:
        text += "; escaped: " + ", ".join(escaped)
    return text


def render_plain(matrix: Matrix) -> str:
    """The matrix as aligned text (no colour), for logs and CI."""
    width = max(len(r.system) for r in matrix.rows)
    intended_width = max(len(r.intended or "-") for r in matrix.rows)
    numbers = "".join(f"{i:>2}  " for i in range(1, len(matrix.invariants) + 1))
    lines = [
        _headline(matrix),
        "",
        f"{'system':<{width}}  {numbers} {'intended':<{intended_width}}  outcome",
    ]
    for row in matrix.rows:
        cells = "".join(f"{_cell(row, inv)} " for inv in matrix.invariants)
        lines.append(
            f"{row.system:<{width}}  {cells} {row.intended or '-':<{intended_width}}  "
            f"{row.outcome()}"
        )
    lines += ["", *_legend(matrix), "", _score_line(matrix)]
    return "\n".join(lines)


def _print_rich(matrix: Matrix) -> bool:
    """Print the matrix with rich if it is installed; False if it is not."""
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # rich is optional: plain text says the same
        return False
    system_w = max(len(r.system) for r in matrix.rows)
    intended_w = max(len(r.intended or "-") for r in matrix.rows)
    # Never squeeze a column: a wider line than the terminal wraps, a squeezed cell lies.
    needed = system_w + intended_w + 12 + 6 * len(matrix.invariants) + 16
    # colour by harness.cli._style's rule (rich's own would ignore --color)
    colour = _style.colour_enabled()
    console = Console(
        width=max(Console().width, needed),
        highlight=False,
        force_terminal=colour,
        no_color=not colour,
    )
    table = Table(title=_headline(matrix), title_justify="left")
    table.add_column("system", no_wrap=True, min_width=system_w)
    for i in range(1, len(matrix.invariants) + 1):
        table.add_column(str(i), justify="center", no_wrap=True, min_width=3)
    table.add_column("intended", no_wrap=True, min_width=intended_w)
    table.add_column("outcome", no_wrap=True, min_width=12)
    styles = {"clean": "green", "caught": "green", "inconclusive": "yellow"}
    for row in matrix.rows:
        outcome = row.outcome()
        table.add_row(
            Text(row.system),
            *(Text(_cell(row, inv).strip() or ".") for inv in matrix.invariants),
            Text(row.intended or "-"),
            Text(outcome, style=styles.get(outcome, "bold red")),
        )
    console.print(table)
    for line in _legend(matrix):
        console.print(line, markup=False)
    console.print(_score_line(matrix), markup=False)
    return True


@click.command()
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
    "--only",
    "only",
    multiple=True,
    metavar="NAME",
    help="Run only this mutant (repeatable); the reference always runs.",
    shell_complete=_complete.complete_mutant,
)
@click.option(
    "--case",
    "case_ids",
    multiple=True,
    help="Run only this case id for every system (repeatable) instead of the certify campaign;"
    " catching scenarios still run their own cases.",
    shell_complete=_complete.complete_case,
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the matrix as JSON to this path.",
)
@click.option("--plain", is_flag=True, help="Plain aligned text even when rich is installed.")
@click.option(
    "--keep-workdir", is_flag=True, help="Keep every system's ledgers, traces and worker logs."
)
@click.option(
    "--worker-deadline",
    type=_cli_values.WORKER_DEADLINE,
    default=60.0,
    show_default=True,
    help="Seconds one worker may run before it is declared hung.",
)
@_style.color_option()
def mutants(
    *,
    db_url: str | None,
    seed: int | None,
    only: tuple[str, ...],
    case_ids: tuple[str, ...],
    json_path: Path | None,
    plain: bool,
    keep_workdir: bool,
    worker_deadline: float,
) -> None:
    """Run every mutant and the reference; print which invariants catch which mistake."""
    from harness.engine.store import _db, _paths
    from harness.systems import mutant_catalogue

    catalogue = mutant_catalogue()
    workdir: Path | None = None
    progress = _progress.Progress("mutants")
    try:
        if json_path is not None:  # written after every system ran: checked before any does
            _paths.writable_file(json_path, "--json")
        workdir = _scratch.make_workdir("crash-harness-mutants-")
        unknown = sorted(set(only) - set(catalogue))
        if unknown:
            raise BadInputError(
                f"--only: unknown mutant(s) {', '.join(unknown)}; "
                f"known mutants: {', '.join(sorted(catalogue))}"
            )
        names = [n for n in catalogue if not only or n in only]
        url = _db.normalise_url(db_url) if db_url else None
        chosen_seed = seed if seed is not None else secrets.randbelow(2**31)
        click.echo(
            f"mutants · {len(names)} mutant(s) + reference · seed {chosen_seed} · "
            f"db {'postgresql' if url and url.startswith('postgresql') else 'sqlite'}"
        )

        progress.plan(len(names) + 1)  # and the reference

        def show(row: SystemRow) -> None:
            fired = ", ".join(sorted(row.fired)) or "nothing"
            progress.advance(_ROW_VERDICTS.get(row.outcome(), "fail"))
            outcome = row.outcome()
            painted = _style.verdict(outcome, _ROW_VERDICTS.get(outcome, "fail"))
            pad = " " * max(0, 12 - len(outcome))
            with progress.above():
                _style.echo(
                    f"  {painted}{pad} {row.system:<40} {row.duration_s:6.1f}s"
                    f"  {progress.counter()}  fired: {fired}"
                )

        progress.draw()  # a row takes a whole campaign: say something before the first

        matrix = run_matrix(
            names=names,
            seed=chosen_seed,
            db_url=url,
            case_ids=list(case_ids) or None,
            worker_deadline_s=worker_deadline,
            workdir=workdir,
            on_row=show,
        )
    except BadInputError as exc:
        progress.close()
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except KeyboardInterrupt as exc:
        progress.close()
        why, status = interruption(exc)
        click.echo(f"{why}; every worker and provider was stopped", err=True)
        sys.exit(status)
    except Exception:
        progress.close()
        click.echo("internal error in crash-harness:\n" + traceback.format_exc(), err=True)
        sys.exit(ExitStatus.INTERNAL_ERROR)
    finally:
        if workdir is not None and not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    progress.close()
    click.echo(f"{len(matrix.rows)} system(s) in {_progress.duration(progress.elapsed())}")
    click.echo("")
    if plain or not _print_rich(matrix):
        click.echo(render_plain(matrix))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(matrix.to_json(), indent=2) + "\n")
        click.echo(f"matrix: {json_path}")
    if keep_workdir and workdir is not None:
        from harness.cli._echo import echo_kept

        echo_kept(workdir)
    sys.exit(matrix.exit_status())
