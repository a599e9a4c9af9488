"""A schedule that fails once and passes on its rerun is verdict ``flaky``, never a traceback
and never a pass: explore writes its report with every run of that schedule in it, and the
failure it saw stands as a violation (exit 1).

The system under test is ``tests._systems:FLAKY``: the reference, whose ledger reads empty
the first time it is ever read (a marker file makes every later read honest), so the first
case judged fails and any rerun of the same schedule passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.engine.case.campaign import Campaign, CampaignSettings, CaseResult
from harness.engine.plan.schedule import CaseSpec
from harness.engine.search.explore import _confirmed, _disagreeing, explore, mark_flaky
from harness.invariants import CheckResult, Status
from harness.reports import render_junit, render_markdown, validate
from harness.systems import resolve
from tests._systems import FLAKY_MARKER_ENV

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "flaky-marker"
    monkeypatch.setenv(FLAKY_MARKER_ENV, str(path))
    return path


def test_explore_calls_a_failure_that_does_not_repeat_flaky(tmp_path: Path, marker: Path) -> None:
    """Hypothesis's FlakyFailure is caught: the schedule's runs are folded into one flaky
    case listing the failing run and the passing rerun, and no minimal failure is claimed."""
    settings = CampaignSettings(
        system=resolve("tests._systems:FLAKY"),
        seed=1,
        runs=1,
        destinations_per_topic=2,
        workdir=tmp_path / "work",
    )
    with Campaign(settings) as campaign:
        found = explore(campaign, budget=5, seed=1, database_dir=None)
    assert marker.exists(), "the flaky system never read its ledger"
    assert found.minimal is None
    assert len(found.flaky) == 1
    flaky = found.flaky[0]
    assert flaky.verdict is Status.FLAKY
    verdicts = [r.verdict for r in flaky.runs]
    assert verdicts[0] is Status.FAIL
    assert Status.PASS in verdicts
    assert {r.spec for r in flaky.runs} == {flaky.spec}
    # the case shows the failing run's evidence, and it is the only entry for that schedule
    assert flaky.invariants["no_silent_loss"].status is Status.FAIL
    assert [r for r in found.tried if r.spec == flaky.spec] == [flaky]
    # every other schedule passed, or was drawn where it could not land (tested nothing)
    others = [r for r in found.tried if r is not flaky]
    assert all(r.verdict in (Status.PASS, Status.GAP) for r in others), [r.spec.id for r in others]
    assert all(r.not_landed for r in others if r.verdict is Status.GAP)


def _result(spec: CaseSpec, verdict: Status) -> CaseResult:
    check = CheckResult(verdict if verdict is not Status.FLAKY else Status.FAIL, "stub")
    return CaseResult(
        spec=spec,
        verdict=verdict,
        invariants={"exactly_once_effect": check},
        workers=[],
        intended=1,
        accepted=1,
        reached={},
        crash_fired=False,
        notes=[],
        duration_s=0.0,
        replay="crash-harness replay x --seed 1 --case " + spec.id,
    )


class _Rerun:
    """A campaign whose every run of a schedule gives ``verdict``."""

    def __init__(self, verdict: Status) -> None:
        self.verdict = verdict
        self.runs: list[CaseSpec] = []

    def run(self, case: CaseSpec, *, slug_prefix: str = "") -> CaseResult:
        self.runs.append(case)
        return _result(case, self.verdict)


@pytest.mark.parametrize(("rerun", "confirmed"), [(Status.FAIL, True), (Status.PASS, False)])
def test_a_shrunk_failure_is_rerun_once_before_it_is_reported(
    rerun: Status, *, confirmed: bool
) -> None:
    """The smallest failure is rerun with the same seed: a second failure confirms it; a pass
    makes it flaky, and both runs are kept."""
    spec = CaseSpec.parse("crash@after_claim#1+crash@before_reconcile#1")
    first = _result(spec, Status.FAIL)
    tried = [_result(CaseSpec(), Status.PASS), first]
    campaign = _Rerun(rerun)
    assert _confirmed(campaign, first, tried, on_case=None) is confirmed  # type: ignore[arg-type]
    assert campaign.runs == [spec]
    if not confirmed:
        [flaky] = mark_flaky(tried, [spec])
        assert flaky.verdict is Status.FLAKY
        assert [r.verdict for r in flaky.runs] == [Status.FAIL, Status.PASS]
        assert [r.spec for r in tried] == [CaseSpec(), spec]
        assert flaky.to_json()["runs"][1]["verdict"] == "pass"


def test_two_failing_runs_need_no_third() -> None:
    """A failure Hypothesis already replayed (two failing runs) is confirmed without a rerun."""
    spec = CaseSpec.parse("crash@after_claim#1")
    tried = [_result(spec, Status.FAIL), _result(spec, Status.FAIL)]
    campaign = _Rerun(Status.PASS)
    assert _confirmed(campaign, tried[-1], tried, on_case=None)  # type: ignore[arg-type]
    assert campaign.runs == []


def _explore_cli(tmp_path: Path, marker: Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    scenario = tmp_path / "flaky.toml"
    scenario.write_text(
        '[scenario]\nname = "flaky"\ndescription = "fails once"\n'
        'system = "tests._systems:FLAKY"\nseed = 1\n'
        "[workload]\nruns = 1\ndestinations_per_topic = 2\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{FLAKY_MARKER_ENV: str(marker)})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "explore",
            str(scenario),
            "--budget",
            "5",
            "--report-dir",
            str(tmp_path / "out"),
            "--examples-dir",
            str(tmp_path / "examples"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    path = tmp_path / "out" / "report.json"
    report = json.loads(path.read_text()) if path.exists() else None
    return proc, report


def test_explore_command_exits_1_on_a_flaky_schedule_and_writes_both_runs(
    tmp_path: Path, marker: Path
) -> None:
    """``crash-harness explore`` on a flaky system: no traceback, a valid report whose flaky
    case lists the failing run and the passing one, the summary says flaky, and the failure
    seen stands: exit 1, the invariant violated (before: exit 3, nothing violated)."""
    proc, report = _explore_cli(tmp_path, marker)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == 1, out
    assert report is not None, out
    validate(report)
    flaky = [c for c in report["cases"] if c["verdict"] == "flaky"]
    assert len(flaky) == 1, [c["verdict"] for c in report["cases"]]
    runs = [r["verdict"] for r in flaky[0]["runs"]]
    assert runs[0] == "fail"
    assert "pass" in runs
    assert "no_silent_loss" in flaky[0]["runs"][0]["invariants_failed"]
    assert report["summary"]["flaky"] == 1
    assert report["summary"]["failed"] == 0
    assert "no_silent_loss" in report["summary"]["invariants_violated"]
    assert "1 of them flaky" in proc.stdout
    assert report["explore"]["flaky"][0]["case"] == flaky[0]["id"]
    assert report["explore"]["minimal"] is None
    assert f"flaky schedule: {flaky[0]['id']}" in proc.stdout
    # this workload has no provider 503, so no schedule retried: the report and the summary
    # say which boundary the search never reached
    assert "before_retry" in report["explore"]["boundaries_unreached"]
    assert "never reached: " in proc.stdout
    assert "before_retry" in proc.stdout
    # the other formats say it too: a failure in JUnit, that says it was flaky
    assert "flaky" in render_markdown(report)
    junit = render_junit(report)
    assert 'errors="0"' in junit
    assert 'failures="1"' in junit  # a drawn schedule that did not land is skipped, not failed
    assert "flaky, a failure stands" in junit
    gaps = sum(1 for c in report["cases"] if c["verdict"] == "gap")
    assert f'skipped="{gaps}"' in junit


def test_any_schedule_whose_runs_disagree_is_flaky_whatever_the_verdicts() -> None:
    """A schedule run twice in one explore that passed once and missed its step once is
    folded into one flaky case (never a pass), showing the first run; one whose runs agree,
    or that ran once, stays as it was."""
    raced, steady = CaseSpec.parse("concurrent_claim"), CaseSpec.parse("crash@after_claim#1")
    tried = [
        _result(raced, Status.PASS),
        _result(steady, Status.PASS),
        _result(raced, Status.GAP),
        _result(steady, Status.PASS),
    ]
    assert _disagreeing(tried) == [raced]
    [flaky] = mark_flaky(tried, _disagreeing(tried))
    assert flaky.verdict is Status.FLAKY
    assert [r.verdict for r in flaky.runs] == [Status.PASS, Status.GAP]
    assert [(r.spec, r.verdict) for r in tried] == [
        (raced, Status.FLAKY),
        (steady, Status.PASS),
        (steady, Status.PASS),
    ]
    assert _disagreeing(tried) == []
