"""Settling: a probe that never says "settled" fails liveness at the deadline with the work's
age; a probe that says so ends the case; the recovery hook runs before each fresh worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.process.settle import Settle
from harness.engine.store import trace
from harness.errors import BadInputError
from harness.invariants import Status
from harness.systems import resolve
from harness.worker_config import WorkerConfig

HOOK_CALLS: list[str] = []


def never_settled(config: WorkerConfig) -> bool:
    return False


def always_settled(config: WorkerConfig) -> bool:
    return True


def count_hook(config: WorkerConfig) -> None:
    HOOK_CALLS.append(config.worker_name)


def _run(tmp_path: Path, settle: Settle) -> tuple[object, list[trace.TraceEvent]]:
    settings = CampaignSettings(
        system=resolve("reference"),
        seed=4,
        cases=[CaseSpec()],
        settle=settle,
        workdir=tmp_path,
        keep_workdir=True,
        runs=1,
    )
    (case,) = run_campaign(settings).cases
    events = trace.read(next(tmp_path.rglob("trace.jsonl")))
    return case, events


def test_a_system_that_never_settles_fails_liveness_at_the_deadline(tmp_path: Path) -> None:
    HOOK_CALLS.clear()
    settle = Settle(
        probe="tests.test_settle:never_settled",
        recovery="tests.test_settle:count_hook",
        deadline_s=0.6,
        interval_s=0.2,
    )
    case, events = _run(tmp_path, settle)
    liveness = case.invariants["liveness"]  # type: ignore[attr-defined]
    assert liveness.status is Status.FAIL, liveness
    problem = liveness.evidence["problems"][0]
    assert problem["deadline_s"] == 0.6
    assert problem["age_s"] >= 0.6
    # every delivery went out: pending by the system's account, listed by the provider's
    assert liveness.evidence["pending"] == []
    assert any(e.event == "settle_deadline" for e in events)
    assert HOOK_CALLS, "the recovery hook never ran"
    assert len(HOOK_CALLS) == sum(1 for e in events if e.event == "recovery_hook")


def test_a_system_that_settles_passes(tmp_path: Path) -> None:
    case, events = _run(tmp_path, Settle(probe="tests.test_settle:always_settled"))
    assert case.verdict is Status.PASS  # type: ignore[attr-defined]
    assert [e.event for e in events if e.event in ("settled", "settle_deadline")] == ["settled"]


def test_a_probe_command_that_cannot_run_is_bad_input(tmp_path: Path) -> None:
    settle = Settle(probe="/nonexistent/probe --flag", deadline_s=1)
    with pytest.raises(BadInputError, match="cannot run"):
        _run(tmp_path, settle)
