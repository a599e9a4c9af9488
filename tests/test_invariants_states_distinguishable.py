"""``states_distinguishable`` on hand-built evidence: pass, fail, unknown."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from harness.engine.store.trace import TraceEvent
from harness.invariants import (
    CHECKERS,
    AuditRow,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Status,
    StatusChange,
    run_checker,
)
from harness.names import DELIVERY_STATES

NAME = "states_distinguishable"


def _row(dest: str, status: str, last_error: str | None = None) -> DeliveryRow:
    return DeliveryRow(
        delivery_id=f"dlv_{dest}",
        run_id="r1",
        destination=dest,
        delivery_status=status,
        idempotency_key=f"ik-dlv_{dest}",
        last_error=last_error,
    )


def _eff(seq: int, dest: str, outcome: str = "fresh", fault: str | None = None) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=f"dlv_{dest}",
        idempotency_key=f"ik-dlv_{dest}",
        outcome=outcome,
        fault=fault,
        received_at=10.0 + seq,
    )


def _obs(
    rows: list[DeliveryRow],
    effects: list[EffectRow],
    *,
    counts: dict[str, int] | None = None,
    audit: tuple[AuditRow, ...] = (),
) -> Observation:
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={"r1": tuple(r.destination for r in rows)},
        deliveries=tuple(rows),
        queue=frozenset(),
        audit=audit,
        state_counts=dict(Counter(r.delivery_status for r in rows)) if counts is None else counts,
    )
    return Observation(intended={"r1": ()}, ledger=ledger, effects=tuple(effects))


ALL_SIX = [
    _row("p", "pending"),
    _row("c", "claimed"),
    _row("d", "delivered"),
    _row("f", "failed", last_error="HTTP 400: bad destination"),
    _row("u", "unknown", last_error="ReadTimeout"),
    _row("r", "review", last_error="key window passed; resend unsafe"),
]


def test_six_states_each_queryable_and_agreeing_with_the_rows() -> None:
    """Rows in all six documented states, the operator's counts agreeing: pass, counts shown."""
    effects = [_eff(1, "d"), _eff(2, "u", fault="accept_then_drop")]
    result = run_checker(NAME, CHECKERS[NAME], _obs(ALL_SIX, effects))
    assert result.status is Status.PASS, result
    assert result.evidence["states"] == dict.fromkeys(DELIVERY_STATES, 1)
    assert result.evidence["operator_view"]["query"] == "GROUP BY delivery_status"


def test_ambiguous_outcome_recorded_failed_is_flagged_with_the_effect() -> None:
    """A delivery whose only accepted effect lost its reply, recorded failed, fails."""
    rows = [_row("a", "failed", last_error="ConnectionError")]
    result = CHECKERS[NAME](_obs(rows, [_eff(7, "a", fault="accept_then_drop")]))
    assert result.status is Status.FAIL
    (problem,) = result.evidence["problems"]
    assert "ambiguous" in problem["problem"]
    assert problem["accepted_effect"]["seq"] == 7
    assert problem["accepted_effect"]["fault"] == "accept_then_drop"


def test_failed_after_a_later_answer_or_a_reconcile_is_not_ambiguous() -> None:
    """If a later request got an answer, or a lookup reconciled it, the outcome was known."""
    rows = [_row("a", "failed", last_error="x"), _row("b", "failed", last_error="y")]
    effects = [
        _eff(1, "a", fault="accept_then_drop"),
        _eff(2, "a", outcome="deduplicated"),
        _eff(3, "b", fault="accept_then_drop"),
    ]
    audit = (AuditRow(1, "dlv_b", "r1", "reconciled", "w2"),)
    assert CHECKERS[NAME](_obs(rows, effects, audit=audit)).status is Status.PASS


def test_undocumented_duplicated_unexplained_or_miscounted_states_fail() -> None:
    """An undocumented state, one delivery in two rows, a failed row without a reason and an
    operator count that disagrees with the rows are each named."""
    rows = [
        _row("a", "done"),
        _row("b", "pending"),
        _row("b", "delivered"),
        _row("c", "failed"),
    ]
    counts = {"done": 1, "pending": 1, "delivered": 1, "failed": 0}
    result = CHECKERS[NAME](_obs(rows, [], counts=counts))
    assert result.status is Status.FAIL
    kinds = [p["problem"] for p in result.evidence["problems"]]
    assert "undocumented state" in kinds
    assert any("more than one row" in k for k in kinds)
    assert any("without a reason" in k for k in kinds)
    assert any("disagrees" in k for k in kinds)


def test_missing_evidence_is_unknown() -> None:
    """No ledger or no effect log: unknown, never pass."""
    obs = _obs(ALL_SIX, [])
    for broken in (replace(obs, ledger=None), replace(obs, effects=None)):
        result = run_checker(NAME, CHECKERS[NAME], broken)
        assert result.status is Status.UNKNOWN
        assert "could not be read" in result.summary


def test_without_the_operator_query_the_rows_still_decide() -> None:
    """A ledger adapter that does not run the count query is judged on its rows, and says so."""
    obs = _obs(ALL_SIX, [])
    assert obs.ledger is not None
    result = CHECKERS[NAME](replace(obs, ledger=replace(obs.ledger, state_counts=None)))
    assert result.status is Status.PASS
    assert "not run" in result.evidence["operator_view"]["query"]


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """Malformed rows that make the checker raise yield unknown with the traceback."""
    obs = _obs(ALL_SIX, [])
    assert obs.ledger is not None
    broken = replace(obs, ledger=replace(obs.ledger, deliveries=(None,)))  # type: ignore[arg-type]
    result = run_checker(NAME, CHECKERS[NAME], broken)
    assert result.status is Status.UNKNOWN
    assert "AttributeError" in result.evidence["traceback"]


def _history(dest: str, *statuses: str, start: int = 1) -> list[StatusChange]:
    return [
        StatusChange(seq=start + i, delivery_id=f"dlv_{dest}", delivery_status=status)
        for i, status in enumerate(statuses)
    ]


def _with_history(obs: Observation, history: list[StatusChange]) -> Observation:
    assert obs.ledger is not None
    return replace(obs, ledger=replace(obs.ledger, status_history=tuple(history)))


DROPPED = [_eff(1, "a", fault="accept_then_drop"), _eff(2, "a", outcome="deduplicated")]


def test_a_lost_reply_recorded_unknown_on_the_way_passes() -> None:
    """The database's history shows the in-doubt send as unknown before it was reconciled (a
    503'd delivery going back to pending is a plain retry): pass, history judged."""
    rows = [_row("a", "delivered"), _row("b", "delivered")]
    history = _history("a", "pending", "claimed", "unknown", "claimed", "delivered") + _history(
        "b", "pending", "claimed", "pending", "claimed", "delivered", start=10
    )
    effects = [*DROPPED, _eff(3, "b", outcome="failed_by_fault", fault="status"), _eff(4, "b")]
    result = CHECKERS[NAME](_with_history(_obs(rows, effects), history))
    assert result.status is Status.PASS, result
    assert result.evidence["status_history"] == {"judged": True, "changes": 10}


def test_a_lost_reply_recorded_pending_and_never_unknown_fails() -> None:
    """Stored as a plain retry, the in-doubt send ends delivered, but while it was in doubt an
    operator could not find it: fail, with the history and the provider's effect."""
    rows = [_row("a", "delivered")]
    history = _history("a", "pending", "claimed", "pending", "claimed", "delivered")
    result = CHECKERS[NAME](_with_history(_obs(rows, DROPPED), history))
    assert result.status is Status.FAIL
    (problem,) = result.evidence["problems"]
    assert "recorded it as 'pending', never 'unknown'" in problem["problem"]
    assert problem["status_history"] == ["pending", "claimed", "pending", "claimed", "delivered"]
    assert problem["accepted_effect"]["seq"] == 1


def test_a_state_held_for_a_while_outside_the_documented_ones_fails() -> None:
    """An undocumented transitional state (gone by the end) is still named."""
    rows = [_row("a", "delivered")]
    history = _history("a", "pending", "claimed", "sending", "delivered")
    result = CHECKERS[NAME](_with_history(_obs(rows, [_eff(1, "a")]), history))
    assert result.status is Status.FAIL
    (problem,) = result.evidence["problems"]
    assert problem["state"] == "sending"


def test_after_a_restore_or_without_a_history_the_end_state_alone_is_judged() -> None:
    """A restore rewrote the history, or the adapter keeps none: that part is not judged, and
    the evidence says why."""
    rows = [_row("a", "delivered")]
    history = _history("a", "pending", "claimed", "pending", "claimed", "delivered")
    obs = _with_history(_obs(rows, DROPPED), history)
    restore = TraceEvent(t=1.0, event="restore", worker="harness", pid=0)
    restored = CHECKERS[NAME](replace(obs, trace=(restore,)))
    assert restored.status is Status.PASS, restored
    assert "restore" in restored.evidence["status_history"]["why"]
    plain = CHECKERS[NAME](_obs(rows, DROPPED))
    assert plain.status is Status.PASS
    assert plain.evidence["status_history"]["judged"] is False
