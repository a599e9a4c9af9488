"""``accepted_reconciled_or_unknown`` on hand-built evidence: pass, fail, unknown."""

from __future__ import annotations

from dataclasses import replace

from harness.engine.store.trace import TraceEvent
from harness.invariants import (
    CHECKERS,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Status,
    run_checker,
)

NAME = "accepted_reconciled_or_unknown"


def _row(dest: str, status: str, last_error: str | None = None) -> DeliveryRow:
    return DeliveryRow(
        delivery_id=f"dlv_{dest}",
        run_id="r1",
        destination=dest,
        delivery_status=status,
        idempotency_key=f"ik-dlv_{dest}",
        last_error=last_error,
    )


def _eff(seq: int, dest: str, outcome: str = "fresh", at: float = 100.0) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=f"dlv_{dest}",
        idempotency_key=f"ik-dlv_{dest}",
        outcome=outcome,
        received_at=at,
    )


def _obs(rows: list[DeliveryRow], effects: list[EffectRow]) -> Observation:
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={"r1": tuple(r.destination for r in rows)},
        deliveries=tuple(rows),
        queue=frozenset(),
        audit=(),
    )
    trace = (
        TraceEvent(t=99.0, event="hit", worker="w1", pid=1, boundary="after_claim", hit=1),
        TraceEvent(t=101.0, event="crash", worker="w1", pid=1, boundary="after_ack", hit=1),
    )
    return Observation(intended={"r1": ()}, ledger=ledger, effects=tuple(effects), trace=trace)


def test_delivered_unknown_and_review_are_honest_ends() -> None:
    """Accepted effects ending delivered, unknown or review pass; refused requests don't count."""
    rows = [_row("a", "delivered"), _row("b", "unknown"), _row("c", "review"), _row("d", "failed")]
    effects = [_eff(1, "a"), _eff(2, "b"), _eff(3, "c"), _eff(4, "d", outcome="failed_by_fault")]
    result = run_checker(NAME, CHECKERS[NAME], _obs(rows, effects))
    assert result.status is Status.PASS, result
    assert result.evidence["ledger_end_states"] == {"delivered": 1, "unknown": 1, "review": 1}


def test_accepted_but_failed_pending_or_missing_fails_with_the_effect_and_boundary() -> None:
    """An accepted effect whose row says failed or pending, or has no row, is named with its
    key, time and the boundary hit just before it."""
    rows = [_row("a", "failed", last_error="ReadTimeout"), _row("b", "pending")]
    effects = [_eff(1, "a"), _eff(2, "b"), _eff(3, "gone")]
    result = CHECKERS[NAME](_obs(rows, effects))
    assert result.status is Status.FAIL
    bad = {p["delivery_id"]: p for p in result.evidence["unreconciled"]}
    assert bad["dlv_a"]["ledger_status"] == "failed"
    assert bad["dlv_a"]["last_error"] == "ReadTimeout"
    assert bad["dlv_a"]["accepted_effect"]["idempotency_key"] == "ik-dlv_a"
    assert bad["dlv_a"]["accepted_effect"]["received_at"] == 100.0
    near = bad["dlv_a"]["accepted_effect"]["nearest_boundary_before"]
    assert near["boundary"] == "after_claim"
    assert bad["dlv_b"]["ledger_status"] == "pending"
    assert bad["dlv_gone"]["ledger_status"] == "missing"
    assert "no ledger row" in bad["dlv_gone"]["why"]


def test_missing_evidence_is_unknown() -> None:
    """No effect log or no ledger: unknown, never pass."""
    obs = _obs([_row("a", "delivered")], [_eff(1, "a")])
    for broken in (replace(obs, effects=None), replace(obs, ledger=None)):
        result = run_checker(NAME, CHECKERS[NAME], broken)
        assert result.status is Status.UNKNOWN
        assert "could not be read" in result.summary


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """Malformed evidence that makes the checker raise is unknown, with the traceback."""
    obs = _obs([_row("a", "delivered")], [None])  # type: ignore[list-item]
    result = run_checker(NAME, CHECKERS[NAME], obs)
    assert result.status is Status.UNKNOWN
    assert "AttributeError" in result.evidence["traceback"]
