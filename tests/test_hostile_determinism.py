"""A rerun that disagrees is never a pass: a worker that duplicates on one run in two is
caught by the determinism rerun of its passing case, and that failure stands (exit 1).

The system is ``tests._hostile_determinism:ALTERNATES``: the reference on odd cases, a worker
that sends every message twice on even ones (a counter file outside the case dirs says
which), so the first run of a case passes and its rerun duplicates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.errors import ExitStatus
from harness.reports import render_junit, render_markdown, validate
from harness.reports.outcome import Expectation, judge
from tests._hostile_determinism import COUNTER_ENV

ROOT = Path(__file__).resolve().parent.parent


def _run_alternating(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``crash-harness run --case baseline --determinism 1`` of ALTERNATES; (process, report)."""
    scenario = tmp_path / "alternates.toml"
    scenario.write_text(
        '[scenario]\nname = "alternates"\ndescription = "duplicates on one run in two"\n'
        'system = "tests._hostile_determinism:ALTERNATES"\nseed = 1\n'
        "[workload]\nruns = 1\ndestinations_per_topic = 2\n"
    )
    scratch = tmp_path / "scratch"  # a kept work dir stays here, pruning nobody else's
    scratch.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CRASH_HARNESS_TMPDIR=str(scratch),
        **{COUNTER_ENV: str(tmp_path / "counter")},
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "run", str(scenario), "--case", "baseline"),
            *("--determinism", "1", "--report-dir", str(out)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads((out / "report.json").read_text())
    return proc, report


def test_a_rerun_that_duplicates_makes_the_case_flaky_and_its_failure_stands(
    tmp_path: Path,
) -> None:
    """The first run passes, its determinism rerun sends every message twice: the case is
    flaky with both runs and both traces, exactly_once_effect is violated, exit 1 (before:
    the case stayed ``pass``, ``flaky: 0``)."""
    proc, report = _run_alternating(tmp_path)
    out = proc.stdout + proc.stderr
    assert (tmp_path / "counter").read_text() == "2", out  # two cases: the run and its rerun
    assert "Traceback" not in out, out
    validate(report)
    (case,) = report["cases"]
    assert case["verdict"] == "flaky", case["verdict"]
    assert [r["verdict"] for r in case["runs"]] == ["pass", "fail"], case["runs"]
    assert "exactly_once_effect" in case["runs"][1]["invariants_failed"]
    assert case["invariants"]["exactly_once_effect"]["status"] == "fail"  # the failing run's
    traces = [r["trace"] for r in case["runs"]]
    assert len(set(traces)) == 2, traces
    assert all(Path(t).is_file() for t in traces), traces  # the work dir is kept, both in it
    (entry,) = report["determinism"]
    assert (entry["first"], entry["rerun"], entry["agree"]) == ("pass", "fail", False)
    assert entry["traces"] == traces
    assert report["summary"]["flaky"] == 1
    assert report["summary"]["passed"] == 0
    assert "exactly_once_effect" in report["summary"]["invariants_violated"]
    assert proc.returncode == 1, out
    assert "invariants violated: exactly_once_effect" in out
    assert "1 of them flaky" in out
    assert f"trace: {traces[1]}" in out
    markdown = render_markdown(report)
    assert f"  - fail: trace `{traces[1]}`" in markdown
    junit = render_junit(report)
    assert 'failures="1"' in junit
    assert "flaky, a failure stands" in junit


def _flaky_report(*runs: str) -> dict[str, Any]:
    """A report of one flaky case whose runs gave ``runs``, showing a failing run if any."""
    shown = "fail" if "fail" in runs else "pass"
    status = {"status": shown, "summary": "two effects for one delivery", "evidence": {}}
    case = {
        "id": "baseline",
        "verdict": "flaky",
        "invariants": {"exactly_once_effect": status},
        "workers": [],
        "runs": [{"verdict": v, "invariants_failed": []} for v in runs],
    }
    return {"cases": [case], "summary": {"not_run": 0}}


def test_a_failing_run_of_a_flaky_case_is_a_violation_and_no_failure_is_inconclusive() -> None:
    """The exit rule: a flaky case one of whose runs failed is a violation (exit 1); one
    whose runs disagree without a failure is inconclusive (3); neither is ever a pass. A
    mutant's expected violation found on one run of two was not found reliably (3)."""
    violated = judge(_flaky_report("pass", "fail"))
    assert violated.status is ExitStatus.VIOLATION, violated.message
    assert "exactly_once_effect" in violated.message
    assert "1 of them flaky" in violated.message
    assert judge(_flaky_report("pass", "unknown")).status is ExitStatus.INCONCLUSIVE
    mutant = judge(_flaky_report("fail", "pass"), Expectation(violation="exactly_once_effect"))
    assert mutant.status is ExitStatus.INCONCLUSIVE, mutant.message
    assert "not found reliably" in mutant.message
