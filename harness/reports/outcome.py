"""One rule from a finished campaign to its exit status, for every route that runs one.

``certify``, ``run``/``sweep``/``replay``/``explore``, ``report merge`` and the pytest plugin
all end here, and they judge the report's JSON rather than live objects, so a merged or
re-read report gets the same answer as the run that wrote it. The rule, in order:

1. **violation** (exit 1): an invariant the campaign expects to hold failed in some case, or
   a negative campaign's expected violation was found nowhere;
2. **coverage gap** (exit 1): a planned crash, pause or fault did not land (a case verdict
   ``gap``), a documented boundary of a full campaign was never crashed at, or a sweep
   missed a (boundary, hit) pair its dry run reached. A gap is never a pass, whatever else
   held, because the case proves nothing about the step that did not happen;
3. **inconclusive** (exit 3): a worker died or hung on its own, a checker could not decide
   an expected invariant, a rerun disagreed, a case was flaky, cases are missing, a process
   of a case outlived its worker or the case (``harness.engine.process._leftovers``), or the
   harness could not write (its disk full: ``harness.engine.store._room``);

A flaky case (its runs of one seed gave different verdicts: a replay within the run, or the
determinism sample's rerun) is never a pass. When one of its runs failed, that failure stands:
the invariant it broke is violated (exit 1), the case is shown flaky with every run. A negative
campaign (a mutant) is the exception: a violation found on one run of two was not found
reliably, and that is inconclusive.
4. **pass** (exit 0): none of the above.

An expectation that expects nothing (an empty ``hold`` and no violation) is refused as bad
input before anything runs (``harness.engine.plan.scenario``); here it would mean "every invariant".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.errors import ExitStatus
from harness.invariants import looks

if TYPE_CHECKING:
    from harness.engine.results import CampaignResult

#: case verdicts that make a campaign inconclusive on their own
_UNDECIDED_VERDICTS = ("unknown", "flaky")
#: worker outcomes that mean the worker did something the harness did not ask for
_ANOMALIES = ("died", "killed_unplanned", "hung")
#: what a result the machine made undecidable says (``harness.invariants.liveness``)
_STARVED = "undecided: the machine starved the worker"


@dataclass(frozen=True)
class Expectation:
    """What a campaign must show: invariants that hold, or a violation that is found."""

    #: invariants that must hold in every case; empty means every invariant
    hold: tuple[str, ...] = ()
    #: for a negative campaign (a mutant): the invariant that must fail somewhere
    violation: str | None = None
    #: the cases were drawn by a search (explore), not planned: one whose step did not land
    #: is listed as unlanded (and never counted as a pass), but is no gap in a plan
    drawn: bool = False

    @classmethod
    def of_scenario(cls, scenario: Mapping[str, Any] | None) -> Expectation:
        """From a report's ``scenario`` section (``expect_hold``, ``expect_violation``)."""
        if not scenario:
            return cls()
        return cls(tuple(scenario.get("expect_hold") or ()), scenario.get("expect_violation"))


@dataclass(frozen=True)
class Outcome:
    status: ExitStatus
    #: one line that says what the campaign showed
    message: str
    #: one line per planned step, boundary or pair that did not land (empty if none)
    gaps: list[str] = field(default_factory=list)
    #: one line per case that could not be decided
    undecided: list[str] = field(default_factory=list)
    #: drawn cases (explore) whose step did not land: neither a pass nor a gap in a plan
    unlanded: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status is ExitStatus.PASSED


def judge(report: Mapping[str, Any], expect: Expectation | None = None) -> Outcome:
    """The outcome of a report (see the module docstring for the rule)."""
    if expect is None:
        expect = Expectation.of_scenario(report.get("scenario"))
    cases: Sequence[Mapping[str, Any]] = report.get("cases", [])
    held = set(expect.hold) if expect.hold else None
    messages: list[str] = []
    status = ExitStatus.PASSED

    # a flaky case (its runs disagreed) shows its failing run's invariants: that failure
    # stands as a violation; for a mutant it is an expected violation found unreliably
    steady = [c for c in cases if c.get("verdict") != "flaky"]
    flaky = len(cases) - len(steady)
    judged_on = steady if expect.violation is not None else cases
    fired = sorted(
        {n for c in judged_on for n, r in c["invariants"].items() if r["status"] == "fail"}
    )
    if expect.violation is not None:
        if expect.violation in fired:
            messages.append(f"expected violation {expect.violation} was found")
        elif flaky:
            status = ExitStatus.INCONCLUSIVE
            messages.append(
                f"expected violation {expect.violation} was not found reliably"
                f" ({flaky} flaky schedule(s): failed, then passed on rerun)"
            )
        else:
            status = ExitStatus.VIOLATION
            messages.append(f"expected violation {expect.violation} was NOT found")
    else:
        broken = [n for n in fired if held is None or n in held]
        if broken:
            status = ExitStatus.VIOLATION
            failing = [
                c
                for c in cases
                if any(
                    r["status"] == "fail" and (held is None or n in held)
                    for n, r in c["invariants"].items()
                )
            ]
            unsteady = sum(1 for c in failing if c.get("verdict") == "flaky")
            also = f", {unsteady} of them flaky: another run passed" if unsteady else ""
            messages.append(
                f"invariants violated: {', '.join(broken)}"
                f" (in {len(failing)} of {len(cases)} case(s){also})"
            )

    gaps = gap_lines(report)
    unlanded: list[str] = []
    if expect.drawn:
        unlanded = [g for g in gaps if not g.startswith(("boundary ", "sweep "))]
        gaps = [g for g in gaps if g not in unlanded]
    if gaps:
        status = ExitStatus.VIOLATION
        messages.append(f"coverage gap: {len(gaps)} planned step(s) or boundary(ies) not landed")

    undecided = [] if expect.violation is not None else _undecided(cases, held)
    determinism = report.get("determinism") or ()
    disagree = [d for d in determinism if not d.get("agree", True)]
    not_run = int(report.get("summary", {}).get("not_run", 0) or 0)
    if status is ExitStatus.PASSED:
        if undecided:
            status = ExitStatus.INCONCLUSIVE
            messages.append(f"{len(undecided)} case(s) inconclusive")
        if disagree:
            status = ExitStatus.INCONCLUSIVE
            messages.append(f"{len(disagree)} rerun(s) disagreed with the first run")
        if not_run or report.get("partial"):
            status = ExitStatus.INCONCLUSIVE
            messages.append(f"{not_run} planned case(s) not run" if not_run else "partial report")
    judged = len(cases) - len(unlanded)
    seen = looks.judged(cases, held)
    if status is ExitStatus.PASSED and expect.violation is None:
        every = "every judged invariant" if seen.not_judged else "every invariant"
        messages.append(
            f"{every.replace('invariant', 'expected invariant')} holds"
            if held is not None
            else f"all {judged} case(s) hold {every}"
        )
    if seen.not_judged and expect.violation is None:
        messages.append(seen.sentence())
    if unlanded:
        messages.append(f"{len(unlanded)} drawn schedule(s) did not land (not counted as passes)")
    return Outcome(status, "; ".join(messages), gaps, undecided, unlanded)


def gap_lines(report: Mapping[str, Any]) -> list[str]:
    """Every planned thing that did not happen, one line each, naming what was seen instead."""
    lines: list[str] = []
    for case in report.get("cases", []):
        if case.get("verdict") != "gap":
            continue
        missed = [
            landing
            for landing in case.get("landings", [])
            if landing.get("landing") in ("not_reached", "unconfirmed")
        ]
        if not missed:
            lines.append(f"{case['id']}: a planned step did not land")
        for landing in missed:
            lines.append(f"{case['id']}: {landing['step']} not landed: {landing['detail']}")
    summary = report.get("summary", {})
    if report.get("plan", {}).get("full", False):
        undecided = _undecided_boundaries(report)
        for name in summary.get("boundaries_uncovered", []):
            if name not in undecided:  # its case is inconclusive, and says why: not a gap
                lines.append(f"boundary {name}: documented, but no crash landed on it")
    sweep = report.get("sweep")
    if isinstance(sweep, Mapping):
        for pair in sweep.get("pairs_missing", []):
            lines.append(f"sweep pair {pair}: reached in the dry run, but no crash landed on it")
        for name in sweep.get("boundaries_unreached", []):
            lines.append(f"boundary {name}: documented, but the sweep's dry run never reached it")
    return lines


def _undecided_boundaries(report: Mapping[str, Any]) -> set[str]:
    """Boundaries whose planned crash case was undecided as a whole (its provider died under
    it): whether a crash lands there is not known, so the campaign is inconclusive about
    them (that case says why), never short of a plan."""
    return {
        str(case["boundary"])
        for case in report.get("cases", [])
        if case.get("boundary") and case.get("undecided_because")
    }


def _undecided(cases: Sequence[Mapping[str, Any]], held: set[str] | None) -> list[str]:
    lines = []
    for case in cases:
        verdict = case.get("verdict")
        anomalies = [w for w in case.get("workers", []) if w.get("outcome") in _ANOMALIES]
        unsure = [
            n
            for n, r in case["invariants"].items()
            if looks.look(r) == "undecided" and (held is None or n in held)
        ]
        if verdict == "flaky":
            said = ", then ".join(str(r.get("verdict")) for r in case.get("runs") or ())
            lines.append(f"{case['id']}: flaky (runs of one seed gave {said or 'two verdicts'})")
        elif case.get("undecided_because"):  # its provider died: nothing in it is decided
            lines.append(f"{case['id']}: {case['undecided_because']}")
        elif anomalies:
            how = ", ".join(f"{w['worker']} {w['outcome']}" for w in anomalies)
            lines.append(f"{case['id']}: {how}")
        elif left := case.get("leftovers"):
            lines.append(
                f"{case['id']}: {len(left)} process(es) of it outlived their worker or the case"
                " (stopped; what they did after is not known)"
            )
        elif starved := [n for n in unsure if _STARVED in str(case["invariants"][n]["summary"])]:
            lines.append(f"{case['id']}: {_STARVED} ({', '.join(starved)})")
        elif unsure:
            lines.append(f"{case['id']}: could not decide {', '.join(unsure)}")
    return lines


def judge_result(result: CampaignResult, expect: Expectation | None = None) -> Outcome:
    """``judge`` for a live campaign result (the report it would write, without timelines)."""
    from harness.reports._contract import assemble, determinism_of, planned_case_ids

    settings = result.settings
    data = assemble(
        settings=settings,
        cases=[c.to_json() for c in result.cases],
        plan=planned_case_ids(settings),
        full=settings.cases is None,
        started_at=result.started_at,
        finished_at=result.finished_at or result.started_at,
        workdir=None,
        partial=False,
        determinism=determinism_of(result),
    )
    data["summary"]["boundaries_covered"] = len(result.covered())
    data["summary"]["boundaries_uncovered"] = list(result.uncovered())
    for key in ("sweep", "scenario", "start"):
        if key in result.extra:
            data[key] = result.extra[key]
    return judge(data, expect)
