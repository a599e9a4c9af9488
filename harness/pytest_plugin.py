"""pytest plugin: crash-inject your worker from your own test suite.

Registered as the ``crash_harness`` entry point (``-p no:crash_harness`` turns it off). It is
lazy: loading pytest imports nothing of the engine, which is imported by the first test that
uses a marker or a fixture below.

- marker ``crash_sweep(target, ...)``: after the test body, sweep ``target`` (a scenario file
  or built-in name, ``"module:attr"``/``"reference"``/``"mutant:NAME"``, or a ``System``): a
  dry run, then one SIGKILL case per (boundary, hit). The test fails, with each broken
  invariant, its summary, compact evidence and the replay command, when a case fails.
- fixtures ``crash_provider`` (a running fake provider), ``crash_campaign`` (run a scenario or
  case ids, get the ``CampaignResult``; ``crash_campaign.check(result)`` fails the test the
  same way the marker does) and ``crash_report`` (write a result's reports).
- options ``--crash-seed``, ``--crash-report-dir``, ``--crash-db``, ``--crash-jobs``, each
  with an ini twin (``crash_seed``, ...). Precedence: command line, then the marker's or the
  call's keyword, then the ini file, then the scenario, then the default.

See docs/pytest-plugin.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fake_providers import ProviderProcess
    from harness.engine.plan.scenario import Scenario
    from harness.engine.results import CampaignResult, CaseResult
    from harness.systems import System

#: (name, flag, ini key, metavar, help); the ini twin shares the help text
_OPTIONS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "seed",
        "--crash-seed",
        "crash_seed",
        "SEED",
        "crash-harness workload seed (default: the scenario's, else 1).",
    ),
    (
        "report_dir",
        "--crash-report-dir",
        "crash_report_dir",
        "DIR",
        "crash-harness: write JSON, Markdown, JUnit and HTML reports of every campaign here "
        "(one folder per test).",
    ),
    (
        "db",
        "--crash-db",
        "crash_db",
        "URL",
        "crash-harness ledger database URL (default: a fresh SQLite file per case; "
        "postgresql://... for a schema per case).",
    ),
    ("jobs", "--crash-jobs", "crash_jobs", "N", "crash-harness: run cases on this many cores (1)."),
)

#: failing cases spelled out in a failure message (the rest are counted)
_SHOWN_CASES = 3
#: characters of one invariant's evidence in a failure message
_EVIDENCE_CHARS = 400

#: CampaignSettings fields the plugin sets itself (the rest may be passed as keywords)
_SET_HERE = frozenset(
    {"system", "seed", "db_url", "cases", "workdir", "replay_prefix", "replay_overrides", "jobs"}
)

MARKER = "crash_sweep"
_MARKER_HELP = (
    "crash_sweep(target, *, depth=1, seed=None, hold=None, expect_violation=None, "
    "coverage=True, **settings): after the test body, sweep a scenario (path or built-in "
    "name) or a System (object, 'module:attr', 'reference', 'mutant:NAME') and fail on any "
    "broken invariant."
)


@dataclass(frozen=True)
class CrashOptions:
    """The plugin's options as resolved from the command line and the ini file."""

    seed: int | None = None
    seed_from_cli: bool = False
    report_dir: Path | None = None
    db: str | None = None
    db_from_cli: bool = False
    jobs: int | None = None
    jobs_from_cli: bool = False


@dataclass
class _Tally:
    campaigns: int = 0
    cases: int = 0
    failed_cases: int = 0
    report_dirs: list[Path] = field(default_factory=list)
    #: every case's invariant results (report JSON form, no evidence): what was judged
    judged_cases: list[dict[str, Any]] = field(default_factory=list)


OPTIONS_KEY = pytest.StashKey[CrashOptions]()
_TALLY_KEY = pytest.StashKey[_Tally]()


# -- options ---------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crash-harness", "crash-harness (crash-inject delivery workers)")
    for name, flag, ini, metavar, help_text in _OPTIONS:
        group.addoption(
            flag, dest=f"crash_harness_{name}", metavar=metavar, default=None, help=help_text
        )
        parser.addini(ini, help=help_text, default="")


def _int(value: str, where: str, *, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise pytest.UsageError(f"{where}: expected a whole number, got {value!r}") from None
    if number < minimum:
        raise pytest.UsageError(f"{where}: expected a number >= {minimum}, got {number}")
    return number


def _resolve_options(config: pytest.Config) -> CrashOptions:
    cli: dict[str, str | None] = {}
    ini: dict[str, str] = {}
    for name, _flag, key, _metavar, _help in _OPTIONS:
        cli[name] = config.getoption(f"crash_harness_{name}")
        raw = config.getini(key)
        ini[name] = raw.strip() if isinstance(raw, str) else ""
    seed = jobs = None
    if cli["seed"] is not None:
        seed = _int(cli["seed"], "--crash-seed", minimum=0)
    elif ini["seed"]:
        seed = _int(ini["seed"], "crash_seed (ini)", minimum=0)
    if cli["jobs"] is not None:
        jobs = _int(cli["jobs"], "--crash-jobs", minimum=1)
    elif ini["jobs"]:
        jobs = _int(ini["jobs"], "crash_jobs (ini)", minimum=1)
    report_dir: Path | None = None
    if cli["report_dir"] is not None:
        report_dir = config.invocation_params.dir / cli["report_dir"]
    elif ini["report_dir"]:
        report_dir = config.rootpath / ini["report_dir"]
    db = cli["db"] if cli["db"] is not None else (ini["db"] or None)
    return CrashOptions(
        seed=seed,
        seed_from_cli=cli["seed"] is not None,
        report_dir=report_dir,
        db=db,
        db_from_cli=cli["db"] is not None,
        jobs=jobs,
        jobs_from_cli=cli["jobs"] is not None,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}{_MARKER_HELP.removeprefix(MARKER)}")
    config.stash[OPTIONS_KEY] = _resolve_options(config)
    config.stash[_TALLY_KEY] = _Tally()


#: set by pytest-xdist in each of its workers: how many there are
_XDIST_COUNT_ENV = "PYTEST_XDIST_WORKER_COUNT"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Under ``pytest -n N`` (pytest-xdist), a marked test becomes N items, ``[crash-shard-
    iofN]``, each sweeping shard i/N of the campaign, so xdist spreads one campaign over its
    workers. Each shard plans from its own dry run, as ``sweep --shard`` does, and the
    shards' cases together are the serial run's."""
    if metafunc.definition.get_closest_marker(MARKER) is None:
        return
    try:
        count = int(os.environ.get(_XDIST_COUNT_ENV, "0"))
    except ValueError:
        return
    if count < 2:
        return
    if "crash_shard" not in metafunc.fixturenames:
        metafunc.fixturenames.append("crash_shard")
    metafunc.parametrize(
        "crash_shard",
        [f"{i}/{count}" for i in range(1, count + 1)],
        indirect=True,
        ids=[f"crash-shard-{i}of{count}" for i in range(1, count + 1)],
    )


@pytest.fixture
def crash_shard(request: pytest.FixtureRequest) -> str | None:
    """The ``i/n`` shard of a marked test's campaign under pytest-xdist (None: all of it)."""
    shard: str | None = getattr(request, "param", None)
    return shard


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A marked test gets ``crash_campaign`` (and through it a tmp_path) without asking.
    for item in items:
        if (
            isinstance(item, pytest.Function)
            and item.get_closest_marker(MARKER) is not None
            and "crash_campaign" not in item.fixturenames
        ):
            item.fixturenames.append("crash_campaign")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    result = yield
    marker = item.get_closest_marker(MARKER)
    if marker is not None and isinstance(item, pytest.Function):
        runner = item.funcargs["crash_campaign"]
        assert isinstance(runner, CrashCampaign)
        runner.run_marker(marker)
    return result


def tally_line(tally: _Tally) -> str:
    """The session's one line: campaigns, cases, failures, and how many invariants were
    judged (a green session over checks the system gave nothing to judge by says so)."""
    from harness.invariants import looks

    line = (
        f"crash-harness: {tally.campaigns} campaign(s), {tally.cases} case(s), "
        f"{tally.failed_cases} failed"
    )
    if tally.judged_cases:
        line += "; " + looks.judged(tally.judged_cases).sentence()
    return line


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    tally = config.stash.get(_TALLY_KEY, None)
    if tally is None or tally.campaigns == 0:
        return
    line = tally_line(tally)
    opts = config.stash[OPTIONS_KEY]
    if opts.report_dir is not None and tally.report_dirs:
        line += f"; reports under {opts.report_dir}"
    terminalreporter.write_line(line)


# -- running campaigns -----------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:120] or "test"


def _looks_like_system(text: str) -> bool:
    if text == "reference" or text.startswith("mutant:"):
        return True
    return ":" in text and not text.endswith(".toml") and "/" not in text


def _scenario_path(text: str, bases: Sequence[Path]) -> Path:
    from harness.engine.plan import scenario as scenario_mod

    given = Path(text)
    if not given.is_absolute():
        for base in bases:
            candidate = base / given
            if candidate.is_file():
                return candidate
    return scenario_mod.resolve_path(text)


def _as_list(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


class CrashCampaign:
    """The ``crash_campaign`` fixture: run campaigns for one test, and judge them."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self.request = request
        self.config = request.config
        self.options = request.config.stash[OPTIONS_KEY]
        self.workdir = workdir
        self.results: list[CampaignResult] = []
        path = getattr(request.node, "path", None)
        self._bases = [p for p in (path.parent if path else None, request.config.rootpath) if p]

    # -- public -------------------------------------------------------------------------------

    def __call__(
        self,
        target: str | os.PathLike[str] | System,
        *,
        cases: Sequence[str] | None = None,
        mode: str | None = None,
        depth: int | None = None,
        seed: int | None = None,
        db: str | None = None,
        jobs: int | None = None,
        **settings: Any,
    ) -> CampaignResult:
        """Run ``target`` and return its ``CampaignResult``.

        ``target``: a scenario (path, or built-in name) or a system (``System``,
        ``"module:attr"``, ``"reference"``, ``"mutant:NAME"``). ``cases``: case ids to run
        (``"baseline"``, ``"crash@after_claim#1"``, ...). ``mode``: ``"certify"`` (a baseline
        and the first hit of every boundary), ``"sweep"`` or ``"list"``; default: the
        scenario's, else certify. Other keywords are ``CampaignSettings`` fields (``runs``,
        ``destinations_per_topic``, ``provider_window_s``, ``provider_faults``,
        ``worker_overrides``, ``worker_deadline_s``).
        """
        return self._run(
            target, cases=cases, mode=mode, depth=depth, seed=seed, db=db, jobs=jobs, **settings
        )

    def sweep(
        self, target: str | os.PathLike[str] | System, *, depth: int = 1, **kwargs: Any
    ) -> CampaignResult:
        """A dry run, then a SIGKILL at every (boundary, hit) it reached (and, at depth 2,
        at every hit of each recovery)."""
        return self(target, mode="sweep", depth=depth, **kwargs)

    def check(
        self,
        result: CampaignResult,
        *,
        hold: str | Iterable[str] | None = None,
        expect_violation: str | None = None,
        coverage: bool = True,
    ) -> None:
        """Fail the test (a readable message, no traceback) unless the result is good.

        Good: no invariant in ``hold`` (default: the scenario's, else all) failed or was left
        undecided in any case, no worker died or hung, and every declared boundary was
        reached (``coverage``); or, with ``expect_violation``, that invariant fired somewhere.
        Invariants the system's ledger adapter cannot give are listed, not failed.
        """
        problem = judge(
            result, hold=_as_list(hold), expect_violation=expect_violation, coverage=coverage
        )
        if problem is not None:
            pytest.fail(problem, pytrace=False)

    # -- the marker -----------------------------------------------------------------------------

    def run_marker(self, marker: pytest.Mark) -> None:
        if len(marker.args) != 1:
            pytest.fail(
                f"@pytest.mark.{MARKER} takes one target (a scenario or a system), "
                f"got {len(marker.args)}",
                pytrace=False,
            )
        kwargs = dict(marker.kwargs)
        hold = kwargs.pop("hold", None)
        expect = kwargs.pop("expect_violation", None)
        coverage = bool(kwargs.pop("coverage", True))
        depth = kwargs.pop("depth", None)
        _check_names(_as_list(hold), expect)
        callspec = getattr(self.request.node, "callspec", None)
        shard = None if callspec is None else callspec.params.get("crash_shard")
        result = self._run(
            marker.args[0],
            mode="sweep",
            depth=depth,
            shard=shard,
            whole_campaign=expect is not None,
            **kwargs,
        )
        if result.extra.get("pytest", {}).get("skipped_shard"):
            pytest.skip(result.extra["pytest"]["skipped_shard"])
        if self.options.report_dir is not None:
            self.write_reports(result)
        self.check(result, hold=hold, expect_violation=expect, coverage=coverage)

    def write_reports(self, result: CampaignResult, name: str | None = None) -> dict[str, Path]:
        """Write JSON, Markdown, JUnit and HTML reports of ``result``; returns their paths."""
        from harness import reports

        if self.options.report_dir is not None:
            base = self.options.report_dir
        else:
            base = self.workdir / "reports"
        where = base / _slug(name or self.request.node.nodeid)
        if len(self.results) > 1 and name is None:
            where = where.with_name(f"{where.name}-{self.results.index(result) + 1}")
        paths = reports.write_reports(result, where)
        result.extra.setdefault("pytest", {})["report_dir"] = str(where)
        self.config.stash[_TALLY_KEY].report_dirs.append(where)
        return paths

    # -- internals ------------------------------------------------------------------------------

    def _target(self, target: str | os.PathLike[str] | System) -> tuple[System, Scenario | None]:
        from harness import systems
        from harness.engine.plan import scenario as scenario_mod

        if isinstance(target, systems.System):
            return target, None
        if isinstance(target, os.PathLike) or (
            isinstance(target, str) and not _looks_like_system(target)
        ):
            scenario = scenario_mod.load(_scenario_path(os.fspath(target), self._bases))
            return scenario.build_system(), scenario
        if isinstance(target, str):
            return systems.resolve(target), None
        raise TypeError(
            f"crash-harness: target must be a scenario path or name, 'module:attr', or a "
            f"System; got {type(target).__name__}"
        )

    def _run(
        self,
        target: str | os.PathLike[str] | System,
        *,
        cases: Sequence[str] | None = None,
        mode: str | None = None,
        depth: int | None = None,
        seed: int | None = None,
        db: str | None = None,
        jobs: int | None = None,
        shard: str | None = None,
        whole_campaign: bool = False,
        **overrides: Any,
    ) -> CampaignResult:
        from harness.engine.case.campaign import (
            Campaign,
            CampaignResult,
            CampaignSettings,
            CaseSpec,
            default_cases,
            finish_campaign,
            validate_cases,
        )
        from harness.engine.case.parallel import run_cases
        from harness.engine.plan import _overrides
        from harness.engine.plan import scenario as scenario_mod
        from harness.engine.search.sweep import sweep
        from harness.engine.store import _db
        from harness.errors import BadInputError

        opts = self.options
        try:
            system, scenario = self._target(target)
            chosen_seed = _first(
                opts.seed if opts.seed_from_cli else None,
                seed,
                opts.seed,
                scenario.seed if scenario is not None else None,
                1,
            )
            chosen_db = _first(opts.db if opts.db_from_cli else None, db, opts.db)
            chosen_jobs = _first(opts.jobs if opts.jobs_from_cli else None, jobs, opts.jobs, 1)
            fields: dict[str, Any] = {}
            replay_prefix = None
            if scenario is not None:
                builtin = scenario.path.parent.resolve() == scenario_mod.builtin_dir().resolve()
                fields = scenario.campaign_fields()
                shown = scenario.path.stem if builtin else str(scenario.path)
                replay_prefix = ["crash-harness", "replay", shown]
            allowed = {f.name for f in dataclasses.fields(CampaignSettings)} - _SET_HERE
            unknown = sorted(set(overrides) - allowed)
            if unknown:
                raise BadInputError(
                    f"unknown setting(s) {', '.join(unknown)}; expected some of "
                    f"{', '.join(sorted(allowed))}"
                )
            # what changes the workload is checked as a scenario file would be, and restated
            # in every replay line; the rest (keep_workdir, ...) changes no verdict
            given = {
                k: _overrides.check(k, v, where="crash-harness: ")
                for k, v in overrides.items()
                if k in _overrides.SETTABLE
            }
            fields.update(overrides)
            fields.update(given)
            settings = CampaignSettings(
                system=system,
                seed=int(chosen_seed),
                db_url=_db.normalise_url(chosen_db) if chosen_db else None,
                workdir=self.workdir / f"campaign-{len(self.results) + 1}",
                replay_prefix=replay_prefix,
                replay_overrides=given,
                jobs=int(chosen_jobs),
                **fields,
            )
            chosen_mode = mode or ("list" if cases else None)
            if chosen_mode is None:
                chosen_mode = scenario.mode if scenario is not None else "certify"
            if chosen_mode not in ("certify", "sweep", "list"):
                raise BadInputError(f"mode {chosen_mode!r}: expected certify, sweep or list")
            plan: list[CaseSpec]
            names = [spec.name for spec in settings.provider_specs()]  # far-side points
            if cases:
                plan = [CaseSpec.parse(c) for c in cases]
            elif chosen_mode == "list" and scenario is not None:
                plan = list(scenario.cases)
            else:
                plan = default_cases(system, names)
            unreached: list[str] = []
            if chosen_mode != "sweep":
                settings.cases = plan
                validate_cases(system, plan, names)
            split = None
            if shard is not None:
                index, count = (int(part) for part in shard.split("/"))
                split = (index, count)
                wants_violation = whole_campaign or (
                    scenario is not None and scenario.violation is not None
                )
                if wants_violation:
                    # "found somewhere" is a question about the whole campaign: one shard
                    # runs all of it, the others say so
                    if index != 1:
                        return self._skipped_shard(
                            settings, "an expected violation is judged by shard 1, whole"
                        )
                    split = None
            with Campaign(settings) as campaign:
                result = CampaignResult(settings=settings, workdir=campaign.workdir)
                campaign.describe_start(result)
                if chosen_mode == "sweep":
                    depth = depth or (scenario.depth if scenario is not None else 1)
                    hits: dict[str, Any] = {}
                    if scenario is not None:  # the file's [cases] sample / all_hits
                        hits["all_hits"] = scenario.all_hits
                        if scenario.sample is not None:
                            hits["sample"] = scenario.sample
                    found, cov = sweep(
                        campaign, depth=depth, jobs=settings.jobs, shard=split, **hits
                    )
                    result.cases.extend(found)
                    result.extra["sweep"] = cov.to_json()
                    # the documented boundaries the dry run never reached (a shard's own
                    # pairs are a slice: the rest are another shard's to cover)
                    unreached = list(cov.unreached)
                    if split is not None:
                        settings.cases = [r.spec for r in found]
                        result.extra["shard"] = {"spec": shard}
                else:
                    result.cases.extend(run_cases(campaign, plan, jobs=settings.jobs))
                    if chosen_mode == "certify":
                        unreached = [b for b in system.boundaries if b not in result.covered()]
            result = finish_campaign(result, campaign)
        except BadInputError as exc:
            pytest.fail(f"crash-harness: {exc}", pytrace=False)
        result.extra["pytest"] = {
            "mode": chosen_mode,
            "unreached": unreached,
            "scenario": str(scenario.path) if scenario is not None else None,
            "expect_violation": scenario.violation if scenario is not None else None,
            "hold": list(scenario.hold) if scenario is not None else None,
            "report_dir": None,
        }
        self.results.append(result)
        tally = self.config.stash[_TALLY_KEY]
        tally.campaigns += 1
        tally.cases += len(result.cases)
        tally.failed_cases += sum(1 for c in result.cases if c.verdict.value == "fail")
        tally.judged_cases += [
            {"invariants": {n: {"status": r.status.value, "summary": r.summary}}}
            for c in result.cases
            for n, r in c.invariants.items()
        ]
        return result

    def _skipped_shard(self, settings: Any, why: str) -> CampaignResult:
        from harness.engine.results import CampaignResult

        result = CampaignResult(settings=settings)
        result.extra["pytest"] = {"skipped_shard": f"crash-harness: {why}"}
        return result


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


# -- judging and the failure message ---------------------------------------------------------


def _squeeze(value: Any, depth: int = 0) -> Any:
    """Evidence cut down to what a person reads first: no nulls, short lists and strings."""
    if isinstance(value, dict):
        return {k: _squeeze(v, depth + 1) for k, v in value.items() if v not in (None, [], {})}
    if isinstance(value, list | tuple):
        items = [_squeeze(v, depth + 1) for v in value[:2]]
        if len(value) > 2:
            items.append(f"... {len(value) - 2} more")
        return items
    if isinstance(value, str) and len(value) > 60:
        return value[:57] + "..."
    return value


def _check_names(hold: Iterable[str] | None, expect_violation: str | None) -> None:
    from harness.invariants import CHECKERS

    for name in [*(hold or []), *([expect_violation] if expect_violation else [])]:
        if name not in CHECKERS:
            pytest.fail(
                f"crash-harness: unknown invariant {name!r}; known: {', '.join(CHECKERS)}",
                pytrace=False,
            )


def _compact(evidence: Any) -> str:
    text = json.dumps(_squeeze(evidence), sort_keys=True, separators=(",", ":"), default=str)
    if len(text) > _EVIDENCE_CHARS:
        text = text[: _EVIDENCE_CHARS - 1] + "…"
    return text


def _case_lines(case: CaseResult, names: Iterable[str]) -> Iterator[str]:
    yield f"{case.verdict.value.upper()} {case.spec.id}"
    from harness.invariants import fixes, looks

    for name in names:
        check = case.invariants[name]
        yield f"  {name} ({looks.LOOK_WORD[looks.look(check)]}): {check.summary}"
        agent = fixes.is_agent(case.reached)
        said = fixes.fix_line(name, agent=agent) if looks.look(check) == "fail" else None
        if said:
            yield f"    {said}"
        if check.evidence:
            yield f"    evidence: {_compact(check.evidence)}"
    for worker in case.workers:
        if worker.outcome_is_anomaly:
            yield f"  worker {worker.worker} {worker.kind.value}" + (
                f" (exit code {worker.exit_code})" if worker.exit_code else ""
            )
            tail = (worker.stack_dump or worker.stderr_tail or "").rstrip().splitlines()[-12:]
            yield from (f"    | {line}" for line in tail)
    for left in case.leftovers:
        yield f"  straggler: {left.line()}"
    for note in case.notes:
        yield f"  note: {note}"
    yield f"  replay: {case.replay}"


def _gap_lines(head: str, gaps: list[str], result: CampaignResult, tail: list[str]) -> str | None:
    """The failure message of a campaign whose only problem is what did not land."""
    if not gaps:
        return None
    lines = [f"{head}: coverage gap: {len(gaps)} planned step(s) did not land (never a pass)"]
    lines.extend(f"  - {g}" for g in gaps[: 4 * _SHOWN_CASES])
    if len(gaps) > 4 * _SHOWN_CASES:
        lines.append(f"  ... and {len(gaps) - 4 * _SHOWN_CASES} more")
    shown = [c for c in result.cases if c.verdict.value == "gap"][:_SHOWN_CASES]
    lines += [f"  replay: {c.replay}" for c in shown]
    return "\n".join([*lines, "", *tail])


def judge(
    result: CampaignResult,
    *,
    hold: list[str] | None = None,
    expect_violation: str | None = None,
    coverage: bool = True,
) -> str | None:
    """``None`` if the result is good; else the failure message (see ``CrashCampaign.check``).

    ``hold`` and ``expect_violation`` default to what the scenario says, if one was run.
    """
    from harness.invariants import CHECKERS, Status, looks

    info: dict[str, Any] = result.extra.get("pytest", {})
    if hold is None and expect_violation is None:
        hold, expect_violation = info.get("hold"), info.get("expect_violation")
    report_dir = info.get("report_dir")
    settings = result.settings
    where = (
        f"system {settings.system.name}, seed {settings.seed}, "
        f"{'postgresql' if (settings.db_url or '').startswith('postgresql') else 'sqlite'}"
    )
    label = info.get("scenario") or settings.system.name
    head = f"crash-harness: {info.get('mode', 'campaign')} of {label} ({where})"
    tail = [f"reports: {report_dir}" if report_dir else "reports: pass --crash-report-dir DIR"]
    if result.workdir is not None:
        tail.append(f"work dir (ledgers, traces, worker logs): {result.workdir}")
    _check_names(hold, expect_violation)
    if not result.cases:
        return "\n".join([f"{head}: no case ran", *tail])
    if hold is not None and not hold and expect_violation is None:
        return f"{head}: hold=[] expects nothing; name invariants, or leave it out for all"

    from harness.reports.outcome import Expectation, judge_result

    outcome = judge_result(result, Expectation(hold=tuple(hold or ()), violation=expect_violation))
    unreached: list[str] = list(info.get("unreached", [])) if coverage else []
    gaps = [g for g in outcome.gaps if coverage or not g.startswith(("boundary ", "sweep "))]
    gaps += [
        f"boundary {b}: declared, but no crash landed on it (a crash plan there is a no-op)"
        for b in unreached
        if not any(g.startswith(f"boundary {b}:") for g in gaps)
    ]
    gap_text = _gap_lines(head, gaps, result, tail)

    if expect_violation is not None:
        if any(
            c.invariants.get(expect_violation) is not None
            and c.invariants[expect_violation].status is Status.FAIL
            for c in result.cases
        ):
            return gap_text
        lines = [
            f"{head}: expected violation {expect_violation} was NOT found "
            f"in {len(result.cases)} case(s)"
        ]
        for case in result.cases[:_SHOWN_CASES]:
            check = case.invariants.get(expect_violation)
            status = check.status.value if check else "missing"
            lines.append(f"  {case.spec.id}: {expect_violation} {status}")
        return "\n".join([*lines, *tail])

    names = hold if hold is not None else list(CHECKERS)
    blind: set[str] = set()
    bad: list[tuple[CaseResult, list[str]]] = []
    for case in result.cases:
        wrong = []
        for name in names:
            check = case.invariants.get(name)
            if check is None or looks.look(check) == "pass":
                continue
            if looks.look(check) == "not_judged":
                blind.add(name)
                continue
            wrong.append(name)
        anomaly = any(w.outcome_is_anomaly for w in case.workers)
        if wrong or anomaly:
            bad.append((case, wrong))
    if not bad:
        return gap_text

    failed = [(c, w) for c, w in bad if c.verdict is Status.FAIL]
    lines = [f"{head}: {len(failed)} of {len(result.cases)} case(s) failed"]
    undecided = len(bad) - len(failed)
    if undecided:
        lines[0] += f", {undecided} inconclusive"
    counts: dict[str, int] = {}
    for case, wrong in bad:
        for name in wrong:
            if case.invariants[name].status is Status.FAIL:
                counts[name] = counts.get(name, 0) + 1
    if counts:
        lines.append(
            "broken: "
            + ", ".join(
                f"{n} (in {counts[n]} case{'s' if counts[n] > 1 else ''})"
                for n in CHECKERS
                if n in counts
            )
        )
    if gaps:
        lines.append(f"coverage gap: {len(gaps)} planned step(s) did not land")
        lines.extend(f"  - {g}" for g in gaps[:_SHOWN_CASES])
    ordered = failed + [(c, w) for c, w in bad if c.verdict is not Status.FAIL]
    for case, wrong in ordered[:_SHOWN_CASES]:
        lines.append("")
        lines.extend(_case_lines(case, wrong))
    if len(ordered) > _SHOWN_CASES:
        lines.append(f"... and {len(ordered) - _SHOWN_CASES} more case(s)")
    if blind:
        lines.append("")
        lines.append(
            "judged: "
            + looks.judged(
                (
                    {"invariants": {n: r.to_json() for n, r in c.invariants.items()}}
                    for c in result.cases
                ),
                names,
            ).sentence()
        )
    if tail:
        lines.append("")
        lines.extend(tail)
    return "\n".join(lines)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def crash_campaign(request: pytest.FixtureRequest, tmp_path: Path) -> CrashCampaign:
    """Run a scenario, a System or a list of case ids; returns the ``CampaignResult``."""
    return CrashCampaign(request, tmp_path / "crash-harness")


@pytest.fixture
def crash_report(crash_campaign: CrashCampaign) -> CrashReport:
    """``crash_report(result, name=None)`` writes the result's reports (JSON, Markdown,
    JUnit, HTML) under ``--crash-report-dir`` (else the test's tmp dir); returns the paths."""
    return CrashReport(crash_campaign)


class CrashReport:
    """The ``crash_report`` fixture."""

    def __init__(self, campaign: CrashCampaign) -> None:
        self._campaign = campaign

    def __call__(self, result: CampaignResult, name: str | None = None) -> dict[str, Path]:
        return self._campaign.write_reports(result, name)


@pytest.fixture
def crash_provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderProcess]:
    """A running fake provider (``payments`` by default), stopped after the test.

    Parametrize it indirectly to choose: ``@pytest.mark.parametrize("crash_provider",
    [{"preset": "chat"}], indirect=True)``; the dict goes to ``ProviderProcess.start``.
    """
    from fake_providers import ProviderProcess

    params = dict(getattr(request, "param", None) or {})
    params.setdefault("log_path", tmp_path / "crash-provider" / "effects.sqlite")
    provider = ProviderProcess.start(**params)
    try:
        yield provider
    finally:
        provider.stop()
