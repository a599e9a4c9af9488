"""certify's seeded sample of crashes during recovery (#26 item 7).

A queue that survives one crash can stick for good after a crash during its recovery; a
default certify adds a few such (depth 2) schedules, chosen with its seed among those its
own first crashes made possible, and says so in its summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.engine.plan.schedule import CaseSpec
from harness.engine.results import CaseResult, Landing, StepRecord
from harness.engine.search.recovery import RECOVERY_SAMPLE, sample, second_crashes
from harness.invariants import Status

BOUNDARIES = ("after_claim", "before_reconcile", "after_ack")


def _first(case_id: str, recovery: dict[str, int], *, landed: bool = True) -> CaseResult:
    spec = CaseSpec.parse(case_id)
    return CaseResult(
        spec=spec,
        verdict=Status.PASS if landed else Status.GAP,
        invariants={},
        workers=[],
        intended=1,
        accepted=1,
        reached={},
        crash_fired=landed,
        notes=[],
        duration_s=0.1,
        replay="",
        hits_by_worker={"w1": {}, "w2": recovery},
        step_records=[
            StepRecord(str(s), Landing.LANDED if landed else Landing.NOT_REACHED, "")
            for s in spec.steps
        ],
    )


FIRSTS = [
    _first("baseline", {"after_claim": 9}),
    _first("crash@after_claim#1", {"after_claim": 2, "before_reconcile": 1}),
    _first("crash@after_ack#1", {"after_ack": 3}),
    _first("crash@before_reconcile#1", {"after_claim": 5}, landed=False),
]


def test_second_crashes_are_at_hits_the_recovery_made_after_a_landed_first_crash() -> None:
    ids = [s.id for s in second_crashes(FIRSTS, BOUNDARIES)]
    assert ids == [
        "crash@after_claim#1+crash@after_claim#1",
        "crash@after_claim#1+crash@after_claim#2",
        "crash@after_claim#1+crash@before_reconcile#1",
        "crash@after_ack#1+crash@after_ack#1",
        "crash@after_ack#1+crash@after_ack#2",
        "crash@after_ack#1+crash@after_ack#3",
    ]


def test_the_sample_is_seeded_small_and_drawn_from_the_possible_ones() -> None:
    every = {s.id for s in second_crashes(FIRSTS, BOUNDARIES)}
    chosen, possible = sample(FIRSTS, BOUNDARIES, seed=3, size=2)
    assert possible == len(every) == 6
    assert len(chosen) == 2
    assert {c.id for c in chosen} <= every
    assert all(c.steps[-1].hit == 1 for c in chosen)  # a recovery's first hit: stable
    again, _ = sample(FIRSTS, BOUNDARIES, seed=3, size=2)
    assert [c.id for c in again] == [c.id for c in chosen]
    drawn = {tuple(c.id for c in sample(FIRSTS, BOUNDARIES, seed=s, size=2)[0]) for s in range(20)}
    assert len(drawn) > 1  # the seed chooses
    assert sample(FIRSTS[:1], BOUNDARIES, seed=3, size=3) == ([], 0)  # nothing to crash again


def test_a_rerun_whose_recovery_reached_a_boundary_more_or_less_often_draws_the_same() -> None:
    """Timing changes how often a recovering worker reaches a boundary (373 possible schedules
    in one run of the reference, 367 in the next); the same seed still draws the same cases,
    so the certify replays from its seed."""
    rerun = [
        FIRSTS[0],
        _first("crash@after_claim#1", {"after_claim": 4, "before_reconcile": 2}),
        _first("crash@after_ack#1", {"after_ack": 1}),
        FIRSTS[3],
    ]
    for seed in range(20):
        first, n = sample(FIRSTS, BOUNDARIES, seed=seed, size=2)
        second, m = sample(rerun, BOUNDARIES, seed=seed, size=2)
        assert n != m
        assert [c.id for c in first] == [c.id for c in second]


def test_certify_runs_the_sample_by_default_says_so_and_the_reference_holds(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "certify", "--seed", "7", "--report-dir", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    record = report["recovery_sample"]
    assert record["planned"] == record["landed"] == RECOVERY_SAMPLE
    assert record["possible"] > RECOVERY_SAMPLE
    deep = [c for c in report["cases"] if c["id"] in record["cases"]]
    assert len(deep) == RECOVERY_SAMPLE
    assert all(c["id"].count("crash@") == 2 and c["verdict"] == "pass" for c in deep)
    assert set(record["cases"]) <= set(report["plan"]["cases"])  # a resume would run them
    assert len(report["cases"]) == 13 + RECOVERY_SAMPLE  # with crash@accepted.payments#1
    said = (
        f"crash during recovery (depth 2): {RECOVERY_SAMPLE} of {record['possible']} possible"
        f" schedule(s) sampled with seed 7, {RECOVERY_SAMPLE} landed"
    )
    assert said in proc.stdout
    assert said[1:] in (tmp_path / "out" / "report.md").read_text()


def test_certify_of_named_cases_adds_no_sample(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "certify", "--seed", "7", "--case", "baseline"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "crash during recovery" not in proc.stdout
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert "recovery_sample" not in report
    assert [c["id"] for c in report["cases"]] == ["baseline"]
