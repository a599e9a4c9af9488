"""``liveness`` on hand-built evidence: pass (trivially, and with detection times), fail,
unknown."""

from __future__ import annotations

from dataclasses import replace

from harness.engine.store.trace import TraceEvent
from harness.invariants import (
    CHECKERS,
    DeliveryRow,
    LedgerSnapshot,
    Observation,
    Policy,
    Status,
    run_checker,
)

NAME = "liveness"
POLICY = Policy(key_window_s=86_400.0, retry_backoff_s=(1.0,), max_attempts=3, lease_s=30.0)


def _row(dest: str, status: str = "delivered", due: float = 100.0) -> DeliveryRow:
    return DeliveryRow(
        delivery_id=f"dlv_{dest}",
        run_id="r1",
        destination=dest,
        delivery_status=status,
        idempotency_key=f"ik-dlv_{dest}",
        next_attempt_at=due,
    )


def _ev(t: float, event: str, **detail: object) -> TraceEvent:
    return TraceEvent(
        t=t,
        event=event,
        worker="w1" if event != "liveness_fault" else "harness",
        pid=1,
        detail=dict(detail) or None,
    )


def _flag(t: float, delivery: str, since: float, at: float) -> TraceEvent:
    return _ev(t, "overdue_flagged", delivery_id=delivery, overdue_since=since, detected_at=at)


def _obs(
    rows: list[DeliveryRow],
    trace: list[TraceEvent],
    *,
    queue: frozenset[str] = frozenset(),
    policy: Policy | None = POLICY,
) -> Observation:
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={},
        deliveries=tuple(rows),
        queue=queue,
        audit=(),
    )
    return Observation(intended={}, ledger=ledger, effects=(), policy=policy, trace=tuple(trace))


def test_no_fault_and_everything_settled_passes_trivially() -> None:
    """Nothing injected, nothing left unsettled: pass, saying so."""
    result = run_checker(NAME, CHECKERS[NAME], _obs([_row("a"), _row("b", "failed")], []))
    assert result.status is Status.PASS
    assert "no liveness fault injected" in result.summary
    assert result.evidence["detections"] == []


def test_an_injected_stall_noticed_passes_with_the_measured_detection_time() -> None:
    """task_never_started, then the watchdog flags the item 2.5 s after it became overdue."""
    trace = [
        _ev(100.0, "liveness_fault", fault="task_never_started"),
        _flag(104.0, "dlv_a", since=101.0, at=103.5),
    ]
    result = CHECKERS[NAME](_obs([_row("a", "pending")], trace))
    assert result.status is Status.PASS, result
    assert result.evidence["max_detection_s"] == 2.5
    assert result.evidence["detections"][0]["delivery_id"] == "dlv_a"
    assert "slowest detection 2.5s" in result.summary


def test_an_injected_stall_nobody_noticed_fails() -> None:
    """A loop_stall with no overdue_flagged event after it: fail, naming the fault."""
    trace = [_flag(90.0, "dlv_x", 80.0, 89.0), _ev(100.0, "liveness_fault", fault="loop_stall")]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.FAIL
    assert result.evidence["problems"][0]["fault"]["fault"] == "loop_stall"


def test_an_unsettled_item_past_due_plus_grace_without_a_flag_fails() -> None:
    """A pending row due at 100 and a case ending at 105 (grace 1 s): overdue, unflagged."""
    rows = [_row("a", "pending"), _row("b", "unknown")]
    result = CHECKERS[NAME](_obs(rows, [_ev(105.0, "exit")], queue=frozenset({"dlv_b"})))
    assert result.status is Status.FAIL
    stuck = {p["delivery_id"]: p for p in result.evidence["problems"]}
    assert stuck["dlv_a"]["unflagged_for_s"] == 4.0
    assert stuck["dlv_b"]["status"] == "unknown"  # still queued: unknown is not abandonment


def test_an_item_not_yet_overdue_or_under_a_live_lease_is_not_flagged() -> None:
    """Due at 100 with 1 s grace, case over at 100.5; a claim whose lease runs to 200."""
    claimed = replace(_row("c", "claimed", due=50.0), lease_expires_at=200.0)
    result = CHECKERS[NAME](_obs([_row("a", "pending"), claimed], [_ev(100.5, "exit")]))
    assert result.status is Status.PASS, result
    assert sorted(result.evidence["not_yet_overdue"]) == ["dlv_a", "dlv_c"]


def test_a_detection_slower_than_the_policy_allows_fails() -> None:
    """With a 1 s bound, a 2.5 s detection is a failure."""
    policy = replace(POLICY, liveness_max_detection_s=1.0)
    trace = [
        _ev(100.0, "liveness_fault", fault="task_never_started"),
        _flag(104.0, "dlv_a", since=101.0, at=103.5),
    ]
    result = CHECKERS[NAME](_obs([_row("a", "pending")], trace, policy=policy))
    assert result.status is Status.FAIL
    assert "slower" in result.evidence["problems"][0]["problem"]


def test_missing_ledger_or_trace_for_unsettled_rows_is_unknown() -> None:
    """No ledger: unknown. Unsettled rows and no trace to tell if they were flagged: unknown."""
    obs = _obs([_row("a", "pending")], [])
    result = run_checker(NAME, CHECKERS[NAME], replace(obs, ledger=None))
    assert result.status is Status.UNKNOWN
    assert "could not be read" in result.summary
    result = run_checker(NAME, CHECKERS[NAME], obs)
    assert result.status is Status.UNKNOWN
    assert result.evidence["undecidable"] == ["dlv_a"]


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """A malformed row makes the checker raise: unknown with the traceback."""
    obs = _obs([None], [])  # type: ignore[list-item]
    result = run_checker(NAME, CHECKERS[NAME], obs)
    assert result.status is Status.UNKNOWN
    assert "AttributeError" in result.evidence["traceback"]


def test_the_harness_clock_reading_decides_overdue_when_recorded() -> None:
    """Ledger times run on the shared clock: with ``observed_at`` = 200 a row due at 100 is
    overdue even though the trace's wall-clock lines end at 100.5."""
    obs = replace(_obs([_row("a", "pending")], [_ev(100.5, "exit")]), observed_at=200.0)
    result = CHECKERS[NAME](obs)
    assert result.status is Status.FAIL
    assert result.evidence["problems"][0]["case_ended_at"] == 200.0


def test_a_collection_a_correct_worker_survives_needs_no_flag() -> None:
    """task_never_started with expect_overdue false and nothing overdue: the worker held its
    tasks, nothing was lost, pass."""
    trace = [_ev(100.0, "liveness_fault", fault="task_never_started", expect_overdue=False)]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.PASS, result
    assert "no work went overdue" in result.summary


def test_work_dropped_under_a_collection_fails_even_though_the_watchdog_saw_it() -> None:
    """After task_never_started a delivery went overdue (the watchdog's waited_s/grace_s
    shape) and was never settled: a live worker dropped due work, fail, with the flag as
    evidence."""
    trace = [
        _ev(100.0, "liveness_fault", fault="task_never_started", expect_overdue=False),
        _ev(102.0, "overdue_flagged", delivery_id="dlv_a", waited_s=1.25, grace_s=1.0),
    ]
    result = CHECKERS[NAME](_obs([_row("a", "pending")], trace))
    assert result.status is Status.FAIL
    (problem,) = result.evidence["problems"]
    assert "dropped" in problem["problem"]
    assert problem["flagged"][0]["detection_s"] == 0.25


def test_a_flag_under_a_collection_then_delivered_is_a_busy_machine_not_a_drop() -> None:
    """The same flag, but the live worker went on and delivered it: on a loaded machine due
    work can wait past a wall-clock grace, and the reference must not be blamed for that
    (a CI run under load once failed it so). Pass, the flag kept as evidence."""
    trace = [
        _ev(100.0, "liveness_fault", fault="task_never_started", expect_overdue=False),
        _ev(102.0, "overdue_flagged", delivery_id="dlv_a", waited_s=1.25, grace_s=1.0),
    ]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.PASS, result
    (recovered,) = result.evidence["flagged_then_delivered"]
    assert recovered["delivery_id"] == "dlv_a"


def test_a_live_worker_that_goes_quiet_after_a_collection_fails() -> None:
    """After task_never_started the harness gave up on the live worker (no word for its
    budget): it stopped delivering, fail, even though a fresh worker settled the work."""
    trace = [
        _ev(100.0, "liveness_fault", fault="task_never_started", expect_overdue=False),
        _ev(102.0, "overdue_flagged", delivery_id="dlv_a", waited_s=1.25, grace_s=1.0),
        _ev(109.0, "liveness_undetected", target="w1", budget_s=7.0),
    ]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.FAIL
    assert result.evidence["problems"][0]["harness_gave_up"][0]["budget_s"] == 7.0


def test_the_harness_giving_up_on_a_stall_fails() -> None:
    """loop_stall, then the harness recorded liveness_undetected: the stall went unnoticed."""
    trace = [
        _ev(100.0, "liveness_fault", fault="loop_stall", expect_overdue=True),
        _ev(112.0, "liveness_undetected", target="w1", budget_s=12.0),
    ]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.FAIL
    assert result.evidence["problems"][0]["harness_gave_up"][0]["budget_s"] == 12.0


def _cpu(waited: float, window: float = 10.0, due: float = 5.0) -> dict[str, object]:
    """The figures the harness records with a deadline or a budget
    (``harness.engine.process._cpu_wait``):
    ``window`` seconds, ``waited`` of them waiting for CPU, meant to give ``due``."""
    had = window - waited
    return {
        "worker": "w1",
        "source": "cgroup cpu.pressure",
        "window_s": window,
        "waited_for_cpu_s": waited,
        "ran_s": 0.1,
        "wait_share": waited / window,
        "had_s": had,
        "required_s": due,
        "stretch": 3.0,
        "starved": had < due,
    }


def test_a_settle_deadline_missed_while_the_machine_starved_the_worker_is_undecided() -> None:
    """The 5 s deadline, stretched to 15 s, and the worker spent 13 s of them waiting for a
    CPU: it had 2 s of its 5. The deadline measured the machine: unknown, saying so with the
    figures; never a failure of the system."""
    trace = [_ev(110.0, "settle_deadline", deadline_s=5, age_s=15, probe="", cpu=_cpu(13.0, 15.0))]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.UNKNOWN, result
    assert result.summary.startswith("undecided: the machine starved the worker"), result
    assert "w1 waited 13.0s for CPU in a 15.0s window" in result.summary
    assert "it had 2.0s of the 5.0s it was due" in result.summary


def test_a_settle_deadline_missed_by_a_worker_that_was_not_waiting_for_cpu_fails() -> None:
    """The same deadline with the worker asleep (a stall waits for no CPU): a failure."""
    trace = [_ev(110.0, "settle_deadline", deadline_s=5, age_s=5, probe="", cpu=_cpu(0.1, 5.1))]
    result = CHECKERS[NAME](_obs([_row("a")], trace))
    assert result.status is Status.FAIL, result


def test_a_stall_budget_run_out_on_a_starved_worker_is_undecided_on_a_sleeping_one_fails() -> None:
    """loop_stall, then the budget ran out: a worker that waited for CPU most of the time may
    simply not have been run (unknown); one that was not waiting stalled (fail)."""
    starved = [
        _ev(100.0, "liveness_fault", fault="loop_stall", expect_overdue=True),
        _ev(136.0, "liveness_undetected", target="w1", budget_s=12.0, cpu=_cpu(30, 36, 12)),
    ]
    result = CHECKERS[NAME](_obs([_row("a")], starved))
    assert result.status is Status.UNKNOWN, result
    assert "undecided: the machine starved the worker" in result.summary
    asleep = [
        starved[0],
        _ev(112.0, "liveness_undetected", target="w1", budget_s=12.0, cpu=_cpu(0.2, 12.2, 12)),
    ]
    assert CHECKERS[NAME](_obs([_row("a")], asleep)).status is Status.FAIL


def test_a_slow_detection_by_a_starved_worker_is_undecided() -> None:
    """2.5 s past due, against a 1 s bound, but the worker waited 7 s for CPU after the
    injection: with that time given back it was in time."""
    policy = replace(POLICY, liveness_max_detection_s=1.0)
    trace = [
        _ev(100.0, "liveness_fault", fault="loop_stall"),
        _flag(104.0, "dlv_a", since=101.0, at=103.5),
        _ev(104.1, "liveness_detected", target="w1", delivery_id="dlv_a", cpu=_cpu(7.0)),
    ]
    result = CHECKERS[NAME](_obs([_row("a", "pending")], trace, policy=policy))
    assert result.status is Status.UNKNOWN, result
    assert result.evidence["starved"][0]["worker"] == "w1"


def test_without_a_ledger_the_settle_watch_judges_both_ways() -> None:
    """No ledger, a daemon the harness watched settle: settled in time holds, a missed
    deadline fails; so a sweep never lists liveness as not judged in one case and violated in
    another. With no settle watched at all it stays unjudged."""
    settled = [_ev(105.0, "settled", rounds=2, after_s=1.5, by="the provider accepted every")]
    held = CHECKERS[NAME](replace(_obs([], settled), ledger=None))
    assert held.status is Status.PASS, held
    assert "settled before the settle deadline" in held.summary
    missed = [_ev(110.0, "settle_deadline", deadline_s=5, age_s=5, probe="")]
    assert CHECKERS[NAME](replace(_obs([], missed), ledger=None)).status is Status.FAIL
    unwatched = run_checker(NAME, CHECKERS[NAME], replace(_obs([], []), ledger=None))
    assert unwatched.status is Status.UNKNOWN
