"""``retry_within_window`` on hand-built evidence: the static and the dynamic part, each able
to fail on its own, both reported; unknown without the effect log."""

from __future__ import annotations

from dataclasses import replace

from harness.invariants import CHECKERS, EffectRow, Observation, Policy, Status, run_checker
from harness.mutants import backoff_past_window
from harness.trace import TraceEvent

NAME = "retry_within_window"
DAY = 86_400.0

SAFE = Policy(key_window_s=DAY, retry_backoff_s=(1.0, 2.0, 4.0), max_attempts=5, lease_s=30.0)


def _eff(seq: int, at: float, outcome: str = "fresh", key: str = "ik-a") -> EffectRow:
    return EffectRow(
        seq=seq,
        destination="a@example.org",
        run_id="r1",
        delivery_id="dlv_a",
        idempotency_key=key,
        outcome=outcome,
        received_at=at,
        credential_id="worker",
    )


def _obs(effects: list[EffectRow], policy: Policy | None = SAFE) -> Observation:
    return Observation(
        intended={"r1": ("a@example.org",)}, ledger=None, effects=tuple(effects), policy=policy
    )


def test_retries_inside_the_window_under_a_bounded_policy_pass_with_both_parts() -> None:
    """A 503, a retry and a dedupe hit within minutes, and a policy whose worst case is far
    inside 24 h: pass, and the evidence shows the static and the dynamic part."""
    effects = [
        _eff(1, 1000.0, "failed_by_fault"),
        _eff(2, 1001.0),
        _eff(3, 1500.0, "deduplicated"),
    ]
    result = run_checker(NAME, CHECKERS[NAME], _obs(effects))
    assert result.status is Status.PASS, result
    assert result.evidence["fired"] == []
    static, dynamic = result.evidence["static"], result.evidence["dynamic"]
    assert static["fired"] is False
    assert static["worst_case_last_attempt_after_first_s"] < DAY
    assert dynamic["fired"] is False
    assert dynamic["keys_seen"] == 1


def test_uncapped_backoff_fails_statically_without_waiting() -> None:
    """The backoff_past_window mutant's policy lets a late attempt land past 24 h: static fires."""
    policy = replace(
        SAFE,
        retry_backoff_s=backoff_past_window.BACKOFF_S,
        max_attempts=backoff_past_window.MAX_ATTEMPTS,
        request_timeout_s=1.0,
    )
    result = CHECKERS[NAME](_obs([_eff(1, 1000.0)], policy))
    assert result.status is Status.FAIL
    assert result.evidence["fired"] == ["static"]
    static = result.evidence["static"]
    assert static["first_attempt_outside_window"] == 18
    assert static["worst_case_last_attempt_after_first_s"] >= DAY
    assert static["attempt_budget_from"] == "request_timeout_s"
    assert "attempt 18" in result.summary


def test_expired_then_accepted_fails_dynamically_naming_the_effect() -> None:
    """The provider accepting a key it had forgotten is the direct sign: dynamic fires."""
    effects = [_eff(1, 1000.0), _eff(2, 1000.0 + DAY + 60, "expired_then_accepted")]
    result = CHECKERS[NAME](_obs(effects))
    assert result.status is Status.FAIL
    assert result.evidence["fired"] == ["dynamic"]
    (late,) = result.evidence["dynamic"]["expired_then_accepted"]
    assert late["effect"]["seq"] == 2
    assert late["key_first_seen"]["received_at"] == 1000.0


def test_a_key_reused_after_the_window_fails_even_if_the_provider_still_deduped() -> None:
    """A request at first-seen + window is late, whatever the provider answered."""
    effects = [_eff(1, 1000.0), _eff(2, 1000.0 + DAY, "deduplicated")]
    result = CHECKERS[NAME](_obs(effects))
    assert result.status is Status.FAIL
    (late,) = result.evidence["dynamic"]["reused_after_window"]
    assert late["window_s"] == DAY
    assert late["late_by_s"] == 0.0


def test_the_window_counts_from_the_first_request_even_a_refused_one() -> None:
    """A 5xx does not prove the request was not accepted: a retry a day after a 503 is late
    (the clock_jump that exposes ignores_key_window), and so is any retry with window 0."""
    late_retry = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1000.0 + DAY + 60)]
    result = CHECKERS[NAME](_obs(late_retry))
    assert result.status is Status.FAIL
    assert result.evidence["dynamic"]["reused_after_window"][0]["late_by_s"] == 60.0
    no_dedupe = replace(SAFE, key_window_s=0.0, max_attempts=1)
    quick_retry = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1000.1)]
    assert CHECKERS[NAME](_obs(quick_retry, no_dedupe)).status is Status.FAIL


def test_without_a_policy_only_the_dynamic_part_runs_and_says_so() -> None:
    """No recorded policy: the static part is reported as not checked; the log still decides."""
    result = CHECKERS[NAME](_obs([_eff(1, 1000.0)], policy=None))
    assert result.status is Status.PASS
    assert result.evidence["static"] == {
        "fired": False,
        "checked": False,
        "why": "no retry policy was recorded",
    }


def test_missing_effect_log_is_unknown() -> None:
    """Without the provider's log the dynamic part cannot run: unknown."""
    obs = Observation(intended={}, ledger=None, effects=None, policy=SAFE)
    result = run_checker(NAME, CHECKERS[NAME], obs)
    assert result.status is Status.UNKNOWN
    assert "could not be read" in result.summary


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """A policy with a nonsensical backoff that makes the checker raise yields unknown."""
    policy = replace(SAFE, retry_backoff_s=("soon",))  # type: ignore[arg-type]
    result = run_checker(NAME, CHECKERS[NAME], _obs([_eff(1, 1.0)], policy))
    assert result.status is Status.UNKNOWN
    assert "TypeError" in result.evidence["traceback"]


def test_a_provider_without_keys_has_no_window_to_keep() -> None:
    """Chat and SMTP ignore keys: the same late reuse that fails on a keyed provider is no
    window violation there (a duplicate it made is exactly_once_effect's to flag)."""
    late = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1000.0 + DAY + 60)]
    keyed = run_checker(NAME, CHECKERS[NAME], _obs(late))
    assert keyed.status is Status.FAIL
    keyless = run_checker(NAME, CHECKERS[NAME], _obs(late, replace(SAFE, provider_keys=False)))
    assert keyless.status is Status.PASS, keyless
    assert keyless.evidence["provider_keys"] is False


def _restored(effects: list[EffectRow], cut: int, policy: Policy) -> Observation:
    restore = TraceEvent(
        t=0.0, event="restore", worker="harness", pid=0, detail={"effects_seq": cut}
    )
    return replace(_obs(effects, policy), trace=(restore,))


def test_a_failed_use_the_restored_ledger_forgot_is_not_a_retry() -> None:
    """Window 0, one attempt: a 503, then a restore erases the attempt, and the worker sends
    once more. Without the restore that is a retry past the window; across it, the ledger's
    lost memory (listed apart). If the forgotten use had landed, the reuse is still flagged."""
    no_dedupe = replace(SAFE, key_window_s=0.0, max_attempts=1)
    effects = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1030.0)]
    plain = run_checker(NAME, CHECKERS[NAME], _obs(effects, no_dedupe))
    assert plain.status is Status.FAIL
    across = run_checker(NAME, CHECKERS[NAME], _restored(effects, 1, no_dedupe))
    assert across.status is Status.PASS, across
    forgotten = across.evidence["dynamic"]["reused_after_restore_without_effect"]
    assert [f["effect"]["seq"] for f in forgotten] == [2]
    landed = [_eff(1, 1000.0), _eff(2, 1030.0)]
    replayed = run_checker(NAME, CHECKERS[NAME], _restored(landed, 1, no_dedupe))
    assert replayed.status is Status.FAIL
    after_cut = run_checker(NAME, CHECKERS[NAME], _restored(effects, 2, no_dedupe))
    assert after_cut.status is Status.FAIL  # both uses before the restore: a plain retry
