"""The gates between a campaign and its verdict: a planned step that did not land is never a
pass, an expectation that expects nothing is refused, and each gate has a test that goes red
when the gate is removed.

Every test here failed on 823ada3 (where a crash at a hit that never came printed ``ok`` and
exited 0), except the unit tests of ``harness.reports.outcome``, which did not exist then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.engine.case.campaign import (
    Campaign,
    CampaignResult,
    CampaignSettings,
    CaseSpec,
)
from harness.engine.case.judge import _verdict
from harness.engine.process.supervisor import OutcomeKind, WorkerOutcome
from harness.engine.results import Landing, StepRecord
from harness.engine.search.sweep import sweep
from harness.errors import ExitStatus
from harness.invariants import CheckResult, Status
from harness.reports.outcome import Expectation, judge, judge_result
from harness.systems import resolve
from tests._systems import (
    FICKLE,
    FICKLE_MARKER_ENV,
    FICKLE_POINT,
    SLOW_START,
    SLOW_START_ENV,
)

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _report(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "r" / "report.json").read_text())
    return data


# -- a planned step that never lands, end to end -----------------------------------------------


def test_certify_a_crash_at_a_hit_that_never_comes_is_a_coverage_gap(tmp_path: Path) -> None:
    """823ada3 printed `ok` and exited 0 for this case."""
    proc = _cli(
        "certify", "--seed", "1", "--case", "crash@after_claim#99", "--report-dir", "r",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == ExitStatus.VIOLATION, proc.stdout + proc.stderr
    assert "GAP  crash@after_claim#99" in proc.stdout
    assert "hit 99 never came" in proc.stdout
    assert "coverage gap" in proc.stdout
    data = _report(tmp_path)
    (case,) = data["cases"]
    assert case["verdict"] == "gap"
    assert data["summary"]["passed"] == 0
    assert data["summary"]["gaps"] == 1
    (landing,) = case["landings"]
    assert landing["landing"] == "not_reached"
    # the boundary's actual hit count is named, so the plan can be fixed
    assert 1 <= landing["hits_reached"] < 99
    assert f"reached after_claim {landing['hits_reached']} time(s)" in landing["detail"]
    xml = (tmp_path / "r" / "report.xml").read_text()
    assert 'type="coverage_gap"' in xml


def test_run_a_scenario_case_that_never_lands_is_a_coverage_gap(tmp_path: Path) -> None:
    proc = _cli(
        "run", "boundary-after-claim", "--case", "crash@after_claim#99", "--report-dir", "r",
        "--determinism", "0", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == ExitStatus.VIOLATION, proc.stdout + proc.stderr
    assert "every expected invariant holds" not in proc.stdout
    assert _report(tmp_path)["cases"][0]["verdict"] == "gap"


@pytest.mark.parametrize(
    ("case_id", "landing"),
    [
        ("provider_5xx:40", "unconfirmed"),  # the provider never saw a 40th send
        ("clock_jump@before_retry#9", "not_reached"),  # a pause that never came
        ("crash@after_claim#1", "landed"),
        ("provider_5xx:1", "landed"),
    ],
)
def test_every_kind_of_step_says_whether_it_landed(
    tmp_path: Path, case_id: str, landing: str
) -> None:
    settings = CampaignSettings(
        system=resolve("reference"), seed=1, workdir=tmp_path / "w", cases=[CaseSpec.parse(case_id)]
    )
    with Campaign(settings) as campaign:
        result = campaign.run(CaseSpec.parse(case_id))
    (record,) = result.step_records
    assert record.landing.value == landing, record
    assert result.verdict is (Status.PASS if landing == "landed" else Status.GAP)


def test_a_race_with_one_racer_did_not_land(tmp_path: Path) -> None:
    """One delivery: the second worker finds nothing to claim, so there was no race."""
    settings = CampaignSettings(
        system=resolve("reference"),
        seed=1,
        workdir=tmp_path / "w",
        runs=1,
        destinations_per_topic=1,
        provider_faults=(),
    )
    with Campaign(settings) as campaign:
        result = campaign.run(CaseSpec.parse("concurrent_claim"))
    (record,) = result.step_records
    assert record.landing is Landing.UNCONFIRMED
    assert "no race" in record.detail
    assert result.verdict is Status.GAP


def test_a_race_among_slow_starters_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy runner every worker takes a while to start; followers as slow as their
    leader still race (a fixed 0.3 s window called this "no race": a gap in CI's soak)."""
    monkeypatch.setenv(SLOW_START_ENV, "0.6")
    settings = CampaignSettings(
        system=SLOW_START, seed=14, workdir=tmp_path / "w", provider_faults=()
    )
    with Campaign(settings) as campaign:
        result = campaign.run(CaseSpec.parse("concurrent_claim:3"))
    (record,) = result.step_records
    assert record.landing is Landing.LANDED, record
    assert result.verdict is Status.PASS


def test_a_provider_fault_wins_its_request_over_the_workloads_own_faults(tmp_path: Path) -> None:
    """The default workload drops one reply and 503s another; a planned fault on the same
    request must still be the one applied (fault-provider-faults' ``provider_5xx:2`` passed
    on 823ada3 though the workload's rule took its request)."""
    settings = CampaignSettings(system=resolve("reference"), seed=1, workdir=tmp_path / "w")
    with Campaign(settings) as campaign:
        for case_id in ("provider_5xx:2", "provider_accept_then_drop:2"):
            result = campaign.run(CaseSpec.parse(case_id))
            assert [r.landing for r in result.step_records] == [Landing.LANDED], case_id
            assert result.verdict is Status.PASS


# -- the sweep gate: covered means the planned crash landed -----------------------------------


@pytest.fixture
def fickle_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    marker = tmp_path / "fickle-marker"
    monkeypatch.setenv(FICKLE_MARKER_ENV, str(marker))
    return marker


def test_sweep_counts_a_pair_covered_only_if_its_crash_landed(
    tmp_path: Path, fickle_marker: Path
) -> None:
    """The dry run reaches fickle_point twice; every later incarnation once. So the planned
    crash@fickle_point#2 cannot land: it is a gap and a missing pair, never covered."""
    settings = CampaignSettings(system=FICKLE, seed=1, workdir=tmp_path / "w")
    with Campaign(settings) as campaign:
        results, coverage = sweep(campaign)
    cov = coverage.to_json()
    assert cov["pairs_missing"] == [f"{FICKLE_POINT}#2"]
    assert cov["pairs_covered"] == cov["pairs_expected"] - 1
    by_id = {r.spec.id: r for r in results}
    assert by_id[f"crash@{FICKLE_POINT}#2"].verdict is Status.GAP
    assert by_id[f"crash@{FICKLE_POINT}#1"].verdict is Status.PASS
    result = CampaignResult(settings=settings, cases=results)
    settings.cases = [r.spec for r in results]
    result.extra["sweep"] = cov
    outcome = judge_result(result, Expectation())
    assert outcome.status is ExitStatus.VIOLATION
    assert any(f"{FICKLE_POINT}#2" in line for line in outcome.gaps)


def test_sweep_command_exits_1_when_a_pair_did_not_land(
    tmp_path: Path, fickle_marker: Path
) -> None:
    scenario = tmp_path / "fickle.toml"
    scenario.write_text(
        '[scenario]\nsystem = "tests._systems:FICKLE"\nseed = 1\n[cases]\nmode = "sweep"\n'
    )
    proc = _cli("sweep", str(scenario), "--report-dir", "r", "--determinism", "0", cwd=tmp_path)
    assert proc.returncode == ExitStatus.VIOLATION, proc.stdout + proc.stderr
    assert "every expected invariant holds" not in proc.stdout
    assert f"sweep pair {FICKLE_POINT}#2" in proc.stdout


def test_pytest_sweep_marker_fails_when_a_pair_did_not_land(
    pytester: pytest.Pytester, fickle_marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """823ada3's plugin passed a sweep with 11 of 25 pairs covered."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.crash_sweep("{FICKLE.name}")
        def test_fickle():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "coverage gap" in text
    assert f"{FICKLE_POINT}#2" in text


# -- expectations that expect nothing are refused ----------------------------------------------


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ("hold = []", "[expect.hold] expected at least one invariant"),
        ("hold = [[1]]", "[expect.hold] expected invariant names, got [1]"),
        ('hold = ["liveness", "liveness"]', "lists an invariant twice"),
        (
            'hold = ["liveness"]\nviolation = "liveness"',
            "give hold (what must pass) or violation",
        ),
    ],
)
def test_an_expectation_that_expects_nothing_is_bad_input(
    tmp_path: Path, expect: str, message: str
) -> None:
    """823ada3 ran `hold = []` on a failing mutant and said 'every expected invariant holds'."""
    path = tmp_path / "s.toml"
    path.write_text(f'[scenario]\nsystem = "mutant:new_key_per_attempt"\n\n[expect]\n{expect}\n')
    for args in (("scenarios", "check", str(path)), ("run", str(path))):
        proc = _cli(*args, cwd=tmp_path)
        assert proc.returncode == ExitStatus.BAD_INPUT, proc.stdout + proc.stderr
        assert message in proc.stderr
        assert f"{path}:5:" in proc.stderr  # file and line of the hold key
        assert "Traceback" not in proc.stderr


# -- the rule itself (harness.reports.outcome and the case verdict) --------------------------------


def _case(verdict: str, **invariants: str) -> dict[str, Any]:
    landings = [{"step": "crash@a#2", "landing": "not_reached", "detail": "w1 reached a 1 time(s)"}]
    return {
        "id": f"case-{verdict}-{len(invariants)}",
        "verdict": verdict,
        "invariants": {
            n: {"status": s, "summary": s, "evidence": {}} for n, s in invariants.items()
        },
        "workers": [],
        "landings": landings if verdict == "gap" else [],
    }


def _doc(*cases: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"cases": list(cases), "summary": {"not_run": 0}, "plan": {"full": False}, **extra}


def test_outcome_rule() -> None:
    passing = _case("pass", liveness="pass")
    assert judge(_doc(passing)).status is ExitStatus.PASSED
    gap = judge(_doc(passing, _case("gap", liveness="pass")))
    assert gap.status is ExitStatus.VIOLATION
    assert gap.gaps == ["case-gap-1: crash@a#2 not landed: w1 reached a 1 time(s)"]
    assert judge(_doc(_case("unknown", liveness="unknown"))).status is ExitStatus.INCONCLUSIVE
    failing = _case("fail", liveness="fail", no_silent_loss="pass")
    assert judge(_doc(failing)).status is ExitStatus.VIOLATION
    # an invariant the campaign does not hold is not its failure
    assert judge(_doc(failing), Expectation(hold=("no_silent_loss",))).passed
    # a negative campaign: found, but a planned step did not land: still a gap
    found = Expectation(violation="liveness")
    assert judge(_doc(failing), found).passed
    assert judge(_doc(failing, _case("gap")), found).status is ExitStatus.VIOLATION
    assert judge(_doc(passing), found).status is ExitStatus.VIOLATION
    # explore's drawn schedules: listed, never a pass, but no gap in a plan
    drawn = judge(_doc(passing, _case("gap")), Expectation(drawn=True))
    assert drawn.passed
    assert drawn.unlanded
    assert "did not land" in drawn.message
    assert "all 1 case(s)" in drawn.message
    # campaign-level coverage
    assert not judge(_doc(passing, sweep={"pairs_missing": ["a#2"]})).passed
    assert not judge(_doc(passing, sweep={"boundaries_unreached": ["a"]})).passed
    uncovered = _doc(passing, summary={"boundaries_uncovered": ["a"], "not_run": 0})
    assert judge(uncovered).passed  # a listed plan promises only its cases
    uncovered["plan"] = {"full": True}
    assert judge(uncovered).status is ExitStatus.VIOLATION
    assert judge(_doc(passing, determinism=[{"agree": False}])).status is ExitStatus.INCONCLUSIVE


def _outcome(kind: OutcomeKind) -> WorkerOutcome:
    return WorkerOutcome("w1", 1, kind, None, None, None, None, 0.0, 0.0)


def test_case_verdict_order() -> None:
    ok = {"x": CheckResult(Status.PASS, "ok")}
    bad = {"x": CheckResult(Status.FAIL, "broken")}
    landed = [StepRecord("crash@a#1", Landing.LANDED, "")]
    done = [_outcome(OutcomeKind.COMPLETED)]
    assert _verdict(ok, done, landed, planned=1) is Status.PASS
    for miss in (Landing.NOT_REACHED, Landing.UNCONFIRMED):
        assert _verdict(ok, done, [StepRecord("s", miss, "")], planned=1) is Status.GAP
    assert _verdict(ok, done, [], planned=1) is Status.GAP  # a step that left no record
    assert _verdict(bad, done, [StepRecord("s", Landing.NOT_REACHED, "")], planned=1) is (
        Status.FAIL
    )
    died = [_outcome(OutcomeKind.DIED)]
    skipped = [StepRecord("s", Landing.NOT_RUN, "")]
    assert _verdict(ok, died, skipped, planned=1) is Status.UNKNOWN


def test_a_worker_that_dies_is_inconclusive_not_a_silent_loss(tmp_path: Path) -> None:
    """The work a dead worker left undone is not judged lost: unknown, and not listed among
    the violated invariants (823ada3 printed 'invariants violated: no_silent_loss')."""
    proc = _cli(
        "certify", "--system", "tests._systems:DIES", "--case", "baseline", "--report-dir", "r",
        "--worker-deadline", "20", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == ExitStatus.INCONCLUSIVE, proc.stdout + proc.stderr
    data = _report(tmp_path)
    assert data["summary"]["invariants_violated"] == []
    assert data["cases"][0]["invariants"]["no_silent_loss"]["status"] == "unknown"
    assert "invariants violated" not in proc.stdout
