"""End to end: real forks, real SIGKILL, a real provider process, SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import systems
from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign, validate_cases
from harness.errors import BadInputError, UnknownBoundaryError
from harness.invariants import Status
from harness.names import BOUNDARIES
from harness.reports import to_json
from tests import _systems

MUTANTS = {
    "transcript_rebuild": "no_restart_duplicates",
    "new_key_per_attempt": "stable_idempotency_key",
    "ack_before_send": "exactly_once_effect",
}


def test_reference_certifies_clean_at_every_boundary(db_url: str | None, tmp_path: Path) -> None:
    """Baseline plus a crash at each of the 11 boundaries and at the provider's far-side
    point (``accepted.payments#1``): every case passes, all covered."""
    settings = CampaignSettings(
        system=systems.resolve("reference"), seed=7, db_url=db_url, workdir=tmp_path
    )
    result = run_campaign(settings)
    report = to_json(result)
    assert [c["verdict"] for c in report["cases"]] == ["pass"] * 13, report
    assert report["cases"][-1]["id"] == "crash@accepted.payments#1"
    assert report["summary"]["boundaries_covered"] == len(BOUNDARIES) == 11
    assert report["database"] == ("postgresql" if db_url else "sqlite")
    crash_cases = [c for c in result.cases if c.spec.boundary]
    for case in crash_cases:
        # The planned kill happened, and a fresh process then finished the job.
        assert [w.kind.value for w in case.workers] == ["crashed_as_planned", "completed"]
        assert case.workers[0].boundary == case.spec.boundary
        assert case.accepted == case.intended == 6


@pytest.mark.parametrize(("mutant", "invariant"), sorted(MUTANTS.items()))
def test_each_mutant_is_caught_by_its_invariant(
    db_url: str | None, tmp_path: Path, mutant: str, invariant: str
) -> None:
    """A broken worker fails certify, and the invariant it breaks is among those named."""
    system = systems.resolve(f"mutant:{mutant}")
    assert system.expected_violation == invariant
    result = run_campaign(CampaignSettings(system=system, seed=7, db_url=db_url, workdir=tmp_path))
    failed = [c for c in result.cases if c.verdict is Status.FAIL]
    assert failed
    fired = {n for c in failed for n, r in c.invariants.items() if r.status is Status.FAIL}
    assert invariant in fired
    case = next(c for c in failed if c.invariants[invariant].status is Status.FAIL)
    assert case.invariants[invariant].evidence


def test_replay_reproduces_the_verdict(tmp_path: Path) -> None:
    """Rerunning a failing case by its id and seed gives the same verdict and evidence."""
    system = systems.resolve("mutant:transcript_rebuild")
    case = CaseSpec.parse("crash@after_delivery_enqueue#1")
    runs = [
        run_campaign(
            CampaignSettings(system=system, seed=11, cases=[case], workdir=tmp_path / str(i))
        ).cases[0]
        for i in range(2)
    ]
    assert runs[0].verdict is runs[1].verdict is Status.FAIL
    assert (
        runs[0].invariants["no_restart_duplicates"].summary
        == runs[1].invariants["no_restart_duplicates"].summary
    )
    assert runs[0].replay == runs[1].replay
    assert "--case crash@after_delivery_enqueue#1" in runs[0].replay.replace("'", "")


def test_worker_that_dies_on_its_own_is_inconclusive_with_stderr(tmp_path: Path) -> None:
    """A worker crash the harness did not cause is never a pass: unknown, with its stderr."""
    result = run_campaign(
        CampaignSettings(
            system=_systems.DIES, seed=3, cases=[CaseSpec(fault="none")], workdir=tmp_path
        )
    )
    case = result.cases[0]
    assert case.verdict is not Status.PASS
    assert case.workers[0].kind.value == "died"
    assert "worker exploded on its own" in case.workers[0].stderr_tail


def test_hung_worker_is_reported_with_its_stack(tmp_path: Path) -> None:
    """A worker that never finishes is killed at its deadline and reported hung with a stack."""
    result = run_campaign(
        CampaignSettings(
            system=_systems.HANGS,
            seed=3,
            worker_deadline_s=1.0,
            cases=[CaseSpec(fault="none")],
            workdir=tmp_path,
        )
    )
    case = result.cases[0]
    assert case.workers[0].kind.value == "hung"
    assert "_hangs" in (case.workers[0].stack_dump or "")
    assert case.verdict is not Status.PASS


def test_silent_loss_is_flagged(tmp_path: Path) -> None:
    """A worker that commits but never delivers exits 0 and still fails no_silent_loss."""
    result = run_campaign(
        CampaignSettings(
            system=_systems.LOSES, seed=3, cases=[CaseSpec(fault="none")], workdir=tmp_path
        )
    )
    case = result.cases[0]
    assert case.workers[0].kind.value == "completed"
    assert case.invariants["no_silent_loss"].status is Status.FAIL
    assert case.verdict is Status.FAIL


def test_unknown_boundary_is_bad_input_listing_the_known_ones() -> None:
    """Arming a boundary the system does not declare is refused before anything runs."""
    with pytest.raises(UnknownBoundaryError, match="after_claim"):
        run_campaign(
            CampaignSettings(
                system=systems.resolve("reference"),
                seed=1,
                cases=[CaseSpec.parse("crash@after_clam#1")],
            )
        )


def test_malformed_case_id_is_bad_input() -> None:
    """A case id that is not a known fault names the expected shape and the known faults."""
    with pytest.raises(BadInputError, match="crash@BOUNDARY#HIT"):
        validate_cases(systems.resolve("reference"), [CaseSpec.parse("after_claim")])
    with pytest.raises(BadInputError, match="FAULT\\[@BOUNDARY#HIT\\]"):
        CaseSpec.parse("crash@after_claim")


def test_unreached_boundary_is_a_coverage_gap(tmp_path: Path) -> None:
    """A documented boundary no crash landed on is listed as uncovered."""
    system = systems.resolve("mutant:ack_before_send")
    result = run_campaign(CampaignSettings(system=system, seed=7, workdir=tmp_path))
    assert "before_reconcile" in result.uncovered()
    assert to_json(result)["summary"]["boundaries_uncovered"] == result.uncovered()


def test_command_route_runs_an_execd_worker(tmp_path: Path) -> None:
    """A worker given as a command is exec'd with the plan in its environment and crashes
    at the armed boundary like a forked one."""
    import sys

    system = systems.resolve(f"cmd:{sys.executable} -m harness.reference")
    settings = CampaignSettings(
        system=system,
        seed=3,
        cases=[CaseSpec.parse("crash@after_provider_accept#1"), CaseSpec.parse("baseline")],
        workdir=tmp_path,
    )
    result = run_campaign(settings)
    crash, baseline = result.cases
    assert crash.verdict is Status.PASS, crash.invariants
    assert [w.kind.value for w in crash.workers] == ["crashed_as_planned", "completed"]
    assert crash.workers[0].boundary == "after_provider_accept"
    assert baseline.verdict is Status.PASS


def test_system_cmd_flag_certifies_an_execd_worker(tmp_path: Path) -> None:
    """``certify --system-cmd 'python -m harness.reference'`` runs the program, not a fork."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "certify",
            "--system-cmd",
            "python -m harness.reference",
            "--seed",
            "3",
            "--case",
            "crash@after_claim#1",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["system"] == "cmd:python -m harness.reference"
    (case,) = report["cases"]
    assert [w["outcome"] for w in case["workers"]] == ["crashed_as_planned", "completed"]
    both = subprocess.run(
        [sys.executable, "-m", "harness", "certify", "--system", "reference", "--system-cmd", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert both.returncode == 2
    assert "not both" in both.stderr
