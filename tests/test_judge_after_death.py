"""A worker that died on its own leaves its work unfinished: what that alone explains is
*unknown*, never a failure of the system; what the worker wrote itself still stands.
``accepted_reconciled_or_unknown`` is both: a row left ``pending`` by a dead agent (its tool
call never got its result) is the death's consequence; a row it wrote ``failed`` is its
own word."""

from __future__ import annotations

import pytest

from harness.engine.case.judge import _after_anomaly
from harness.engine.process.supervisor import OutcomeKind, WorkerOutcome
from harness.invariants import CheckResult, Status

NAME = "accepted_reconciled_or_unknown"


def _died() -> WorkerOutcome:
    return WorkerOutcome("w1", 1, OutcomeKind.DIED, 1, None, None, None, 0.0, 1.0)


def _completed() -> WorkerOutcome:
    return WorkerOutcome("w1", 1, OutcomeKind.COMPLETED, 0, None, None, None, 0.0, 1.0)


def _failed(*states: str) -> dict[str, CheckResult]:
    problems = [{"delivery_id": f"d{n}", "ledger_status": s} for n, s in enumerate(states)]
    return {NAME: CheckResult(Status.FAIL, "not recorded", {"unreconciled": problems})}


@pytest.mark.parametrize("states", [("pending",), ("missing", "claimed"), ("pending", "missing")])
def test_rows_a_dead_worker_left_unfinished_are_undecided(states: tuple[str, ...]) -> None:
    checks = _after_anomaly(_failed(*states), [_died()])
    assert checks[NAME].status is Status.UNKNOWN, checks[NAME]
    assert "never finished" in checks[NAME].summary
    assert checks[NAME].evidence["undecided_because"] == "w1 died"


@pytest.mark.parametrize("states", [("failed",), ("pending", "failed")])
def test_a_row_the_worker_wrote_failed_stands_even_after_its_death(
    states: tuple[str, ...],
) -> None:
    checks = _after_anomaly(_failed(*states), [_died()])
    assert checks[NAME].status is Status.FAIL, checks[NAME]


def test_with_no_death_an_unfinished_row_is_a_failure() -> None:
    checks = _after_anomaly(_failed("pending"), [_completed()])
    assert checks[NAME].status is Status.FAIL
