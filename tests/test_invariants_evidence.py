"""The evidence behind terminal states (issue #26) on hand-built rows: each checker passes on
what the reference leaves, fails on the one mistake it is for, and says unknown without its
evidence."""

from __future__ import annotations

from dataclasses import replace

from harness.invariants import (
    CHECKERS,
    NOT_JUDGED,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Policy,
    Status,
    run_checker,
)
from harness.snapshot import body_hash, unread_ledger

POLICY = Policy(key_window_s=60.0, retry_backoff_s=(1.0,), max_attempts=3, lease_s=5.0)


def _row(status: str = "delivered", **kw: object) -> DeliveryRow:
    base: dict[str, object] = {
        "delivery_id": "dlv_a",
        "run_id": "r1",
        "destination": "a",
        "delivery_status": status,
        "idempotency_key": "ik-a",
        "provider_message_id": "msg_1" if status == "delivered" else None,
        "attempt_count": 1,
    }
    base.update(kw)
    return DeliveryRow(**base)  # type: ignore[arg-type]


def _eff(seq: int = 1, outcome: str = "fresh", **kw: object) -> EffectRow:
    base: dict[str, object] = {
        "seq": seq,
        "destination": "a",
        "run_id": "r1",
        "delivery_id": "dlv_a",
        "idempotency_key": "ik-a",
        "outcome": outcome,
        "provider_message_id": "msg_1" if outcome == "fresh" else None,
        "received_at": float(seq),
        "status_code": 200 if outcome == "fresh" else None,
    }
    base.update(kw)
    return EffectRow(**base)  # type: ignore[arg-type]


def _obs(rows: list[DeliveryRow], effects: list[EffectRow] | None, **policy: object) -> Observation:
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={"r1": ("a",)},
        deliveries=tuple(rows),
        queue=frozenset(),
        audit=(),
    )
    return Observation(
        intended={"r1": ("a",)},
        ledger=ledger,
        effects=None if effects is None else tuple(effects),
        policy=replace(POLICY, **policy),  # type: ignore[arg-type]
    )


def _judge(name: str, obs: Observation) -> Status:
    return run_checker(name, CHECKERS[name], obs).status


# -- delivered_has_receipt -------------------------------------------------------------------


def test_receipt_kept_passes() -> None:
    assert _judge("delivered_has_receipt", _obs([_row()], [_eff()])) is Status.PASS


def test_receipt_lost_or_wrong_fails_naming_both_ids() -> None:
    for stored in (None, "dlv_a"):
        obs = _obs([_row(provider_message_id=stored)], [_eff()])
        result = run_checker("delivered_has_receipt", CHECKERS["delivered_has_receipt"], obs)
        assert result.status is Status.FAIL, result
        assert "'msg_1'" in result.summary
        assert repr(stored) in result.summary


def test_receipt_effect_of_another_key_is_left_to_stable_idempotency_key() -> None:
    obs = _obs([_row(provider_message_id=None)], [_eff(idempotency_key="ik-other")])
    result = run_checker("delivered_has_receipt", CHECKERS["delivered_has_receipt"], obs)
    assert result.status is Status.PASS
    assert result.evidence["left_to_stable_idempotency_key"][0]["effect_key"] == "ik-other"
    no_keys = _obs(
        [_row(provider_message_id=None)], [_eff(idempotency_key="ik-other")], provider_keys=False
    )
    assert _judge("delivered_has_receipt", no_keys) is Status.FAIL


def test_receipt_without_one_effect_is_left_to_the_count_and_no_log_is_unknown() -> None:
    assert _judge("delivered_has_receipt", _obs([_row()], [])) is Status.PASS
    assert _judge("delivered_has_receipt", _obs([_row()], None)) is Status.UNKNOWN


# -- no_silent_loss: a failed after a temporary answer ----------------------------------------


def _answered(code: int, n: int = 1) -> list[EffectRow]:
    return [_eff(seq=i + 1, outcome="failed_by_fault", status_code=code) for i in range(n)]


def test_failed_after_a_temporary_answer_with_attempts_left_is_named_a_silent_loss() -> None:
    for code in (503, 429, 408, 425):
        obs = _obs([_row("failed", attempt_count=1)], _answered(code))
        result = run_checker("no_silent_loss", CHECKERS["no_silent_loss"], obs)
        assert result.status is Status.FAIL, (code, result)
        assert result.evidence["lost"][0]["why"] == "gave_up_on_a_temporary_answer"


def test_failed_after_a_permanent_answer_or_the_last_attempt_is_settled() -> None:
    assert _judge("no_silent_loss", _obs([_row("failed")], _answered(400))) is Status.PASS
    spent = _obs([_row("failed", attempt_count=3)], _answered(503, 3))
    assert _judge("no_silent_loss", spent) is Status.PASS


def test_smtp_4xx_is_temporary_and_5xx_permanent() -> None:
    temp = _obs([_row("failed")], _answered(451), surface="smtp")
    assert _judge("no_silent_loss", temp) is Status.FAIL
    perm = _obs([_row("failed")], _answered(550), surface="smtp")
    assert _judge("no_silent_loss", perm) is Status.PASS


def test_failed_after_a_temporary_answer_without_a_recorded_policy_is_unknown() -> None:
    obs = replace(_obs([_row("failed")], _answered(503)), policy=None)
    assert _judge("no_silent_loss", obs) is Status.UNKNOWN


# -- retry_after_honoured --------------------------------------------------------------------


def _throttled_then_retried(after_s: float) -> list[EffectRow]:
    return [
        _eff(seq=1, outcome="failed_by_fault", status_code=429, retry_after_s=1.0),
        _eff(seq=2, received_at=1.0 + after_s),
    ]


def test_a_retry_after_the_retry_after_passes_and_one_before_fails() -> None:
    assert _judge("retry_after_honoured", _obs([_row()], _throttled_then_retried(1.0))) is (
        Status.PASS
    )
    obs = _obs([_row()], _throttled_then_retried(0.001))
    result = run_checker("retry_after_honoured", CHECKERS["retry_after_honoured"], obs)
    assert result.status is Status.FAIL, result
    assert result.evidence["early"][0]["waited_s"] == 0.001


def test_an_answer_without_retry_after_sets_no_floor_and_no_log_is_unknown() -> None:
    quick = [_eff(seq=1, outcome="failed_by_fault", status_code=503), _eff(seq=2)]
    assert _judge("retry_after_honoured", _obs([_row()], quick)) is Status.PASS
    assert _judge("retry_after_honoured", _obs([_row()], None)) is Status.UNKNOWN


# -- content_matches_ledger ------------------------------------------------------------------


def test_the_body_the_ledger_recorded_passes_and_another_recipients_fails() -> None:
    mine, theirs = body_hash("Hello Ann\n\n[ref ch-a]"), body_hash("Hello Bob\n\n[ref ch-b]")
    rows = [_row(body_hash=mine), _row(delivery_id="dlv_b", destination="b", body_hash=theirs)]
    ok = _obs(rows, [_eff(body_hash=body_hash("Hello Ann\r\n\r\n[ref ch-a]\r\n"))])
    assert _judge("content_matches_ledger", ok) is Status.PASS
    swapped = _obs(rows, [_eff(body_hash=theirs)])
    result = run_checker("content_matches_ledger", CHECKERS["content_matches_ledger"], swapped)
    assert result.status is Status.FAIL, result
    assert result.evidence["mismatched"][0]["same_as_the_ledger_body_of"] == ["dlv_b"]


def test_content_without_a_ledger_body_is_not_judged_and_without_a_provider_hash_unknown() -> None:
    no_body = run_checker(
        "content_matches_ledger",
        CHECKERS["content_matches_ledger"],
        _obs([_row()], [_eff(body_hash=body_hash("x"))]),
    )
    assert no_body.status is Status.UNKNOWN
    assert no_body.summary.startswith(NOT_JUDGED)
    unread = _obs([_row(body_hash=body_hash("x"))], [_eff()])
    assert _judge("content_matches_ledger", unread) is Status.UNKNOWN


def test_a_system_without_a_ledger_adapter_is_not_judged_never_passed() -> None:
    """No rows to read at all: the receipt and content rules say *not judged*, with why."""
    obs = replace(_obs([], [_eff(body_hash=body_hash("x"))]), ledger=unread_ledger("mine"))
    for name in ("delivered_has_receipt", "content_matches_ledger"):
        result = run_checker(name, CHECKERS[name], obs)
        assert result.status is Status.UNKNOWN, name
        assert result.summary.startswith(NOT_JUDGED), name
        assert "no ledger adapter" in result.summary, name
