"""``retry_within_window`` on hand-built evidence: judged from the provider's log against the
window the provider applies, never the worker's declared window or retry settings (those are
reported as an outlook only); unknown without the effect log or the provider's window."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness import systems
from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.store.trace import TraceEvent
from harness.invariants import (
    CHECKERS,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Policy,
    Status,
    run_checker,
)
from harness.mutants import backoff_past_window

NAME = "retry_within_window"
DAY = 86_400.0

SAFE = Policy(
    key_window_s=DAY,
    retry_backoff_s=(1.0, 2.0, 4.0),
    max_attempts=5,
    lease_s=30.0,
    provider_window_s=DAY,
)


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


def test_retries_inside_the_window_under_a_bounded_policy_pass_with_the_outlook() -> None:
    """A 503, a retry and a dedupe hit within minutes, and a policy whose worst case is far
    inside 24 h: pass, and the evidence shows the log's part, the windows and the outlook."""
    effects = [
        _eff(1, 1000.0, "failed_by_fault"),
        _eff(2, 1001.0),
        _eff(3, 1500.0, "deduplicated"),
    ]
    result = run_checker(NAME, CHECKERS[NAME], _obs(effects))
    assert result.status is Status.PASS, result
    assert result.evidence["fired"] == []
    outlook, dynamic = result.evidence["policy_outlook"], result.evidence["dynamic"]
    assert outlook["judged"] is False
    assert outlook["first_attempt_that_could_land_outside_window"] is None
    assert outlook["worst_case_last_attempt_after_first_s"] < DAY
    assert dynamic["fired"] is False
    assert dynamic["keys_seen"] == 1
    assert result.evidence["windows"]["provider_window_s"] == DAY


def test_uncapped_backoff_alone_is_no_violation_only_an_outlook() -> None:
    """The backoff_past_window mutant's settings, with a log whose requests all stayed inside
    the window: pass. Settings are the worker's word; the outlook says attempt 18 could land
    past 24 h, but only a request that did so fails (a worker checking the window before
    each resend never sends it)."""
    policy = replace(
        SAFE,
        retry_backoff_s=backoff_past_window.BACKOFF_S,
        max_attempts=backoff_past_window.MAX_ATTEMPTS,
        request_timeout_s=1.0,
    )
    effects = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1001.0)]
    result = CHECKERS[NAME](_obs(effects, policy))
    assert result.status is Status.PASS, result
    assert result.evidence["fired"] == []
    outlook = result.evidence["policy_outlook"]
    assert outlook["first_attempt_that_could_land_outside_window"] == 18
    assert outlook["worst_case_last_attempt_after_first_s"] >= DAY
    assert outlook["attempt_budget_from"] == "request_timeout_s"
    assert "attempt 18" in result.summary
    late = [*effects, _eff(3, 1000.0 + DAY + 1.0)]
    assert CHECKERS[NAME](_obs(late, policy)).status is Status.FAIL


def test_the_providers_window_decides_not_the_one_the_worker_declares() -> None:
    """The worker (and its ledger rows) declare 24 h, the provider keeps keys 300 s: a retry
    600 s after a 503 is late, and the worker cannot pass by declaring a longer window."""
    rows = (
        DeliveryRow(
            delivery_id="dlv_a",
            run_id="r1",
            destination="a@example.org",
            delivery_status="delivered",
            idempotency_key="ik-a",
            key_window_s=DAY,
        ),
    )
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={"r1": ("a@example.org",)},
        deliveries=rows,
        queue=frozenset(),
        audit=(),
    )
    believes_a_day = replace(SAFE, key_window_s=DAY, provider_window_s=300.0)
    effects = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1600.0)]
    obs = replace(_obs(effects, believes_a_day), ledger=ledger)
    result = run_checker(NAME, CHECKERS[NAME], obs)
    assert result.status is Status.FAIL, result
    (late,) = result.evidence["dynamic"]["reused_after_window"]
    assert late["window_s"] == 300.0
    assert late["late_by_s"] == 300.0
    windows = result.evidence["windows"]
    assert windows == {
        "provider_window_s": 300.0,
        "worker_told_key_window_s": DAY,
        "ledger_declared_key_windows_s": [DAY],
    }
    assert "300.0s window" in result.summary
    honest = replace(obs, policy=replace(believes_a_day, provider_window_s=DAY))
    assert run_checker(NAME, CHECKERS[NAME], honest).status is Status.PASS


def test_a_reused_key_without_the_providers_window_is_unknown() -> None:
    """No record of the provider's window (only the worker's): a reuse cannot be judged, so
    unknown; the worker's own window is not taken instead. The provider's own verdicts still
    count: expired_then_accepted fails, a dedupe hit says it still knew the key."""
    effects = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1001.0)]
    worker_word_only = replace(SAFE, provider_window_s=None)
    result = run_checker(NAME, CHECKERS[NAME], _obs(effects, worker_word_only))
    assert result.status is Status.UNKNOWN, result
    assert result.evidence["dynamic"]["repeats_without_known_window"] == 1
    expired = [_eff(1, 1000.0), _eff(2, 1000.0 + DAY + 60, "expired_then_accepted")]
    assert CHECKERS[NAME](_obs(expired, worker_word_only)).status is Status.FAIL
    remembered = [_eff(1, 1000.0), _eff(2, 1001.0, "deduplicated")]
    assert CHECKERS[NAME](_obs(remembered, worker_word_only)).status is Status.PASS


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
    no_dedupe = replace(SAFE, key_window_s=0.0, provider_window_s=0.0, max_attempts=1)
    quick_retry = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1000.1)]
    assert CHECKERS[NAME](_obs(quick_retry, no_dedupe)).status is Status.FAIL


def test_without_a_policy_the_log_still_decides_and_the_outlook_says_why_not() -> None:
    """No recorded policy: no outlook (said so); a key used once is inside any window."""
    result = CHECKERS[NAME](_obs([_eff(1, 1000.0)], policy=None))
    assert result.status is Status.PASS
    assert result.evidence["policy_outlook"] == {
        "judged": False,
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
    lost memory (listed apart). If the forgotten use had landed, the resend is a replayed
    effect: restore_no_replay's and exactly_once_effect's, listed apart here."""
    no_dedupe = replace(SAFE, key_window_s=0.0, provider_window_s=0.0, max_attempts=1)
    effects = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1030.0)]
    plain = run_checker(NAME, CHECKERS[NAME], _obs(effects, no_dedupe))
    assert plain.status is Status.FAIL
    across = run_checker(NAME, CHECKERS[NAME], _restored(effects, 1, no_dedupe))
    assert across.status is Status.PASS, across
    forgotten = across.evidence["dynamic"]["reused_after_restore_without_effect"]
    assert [f["effect"]["seq"] for f in forgotten] == [2]
    landed = [_eff(1, 1000.0), _eff(2, 1030.0)]
    replayed = run_checker(NAME, CHECKERS[NAME], _restored(landed, 1, no_dedupe))
    assert replayed.status is Status.PASS, replayed
    assert len(replayed.evidence["dynamic"]["resent_after_acceptance"]) == 1
    after_cut = run_checker(NAME, CHECKERS[NAME], _restored(effects, 2, no_dedupe))
    assert after_cut.status is Status.FAIL  # both uses before the restore: a plain retry


@pytest.mark.parametrize(
    ("told", "verdict"), [(DAY, Status.FAIL), (None, Status.PASS)], ids=["told-a-day", "told-300"]
)
def test_a_worker_told_a_longer_window_than_the_provider_keeps_is_caught(
    tmp_path: Path, told: float | None, verdict: Status
) -> None:
    """End to end: the provider keeps keys 300 s; a 503, then the clock moves 600 s while the
    worker holds before its retry. Told 24 h (what its ledger rows then say too), the
    reference resends the key the provider forgot, and retry_within_window fails it from the
    provider's window; told the truth, it goes to review and passes."""
    overrides = {} if told is None else {"key_window_s": told}
    result = run_campaign(
        CampaignSettings(
            system=systems.resolve("reference"),
            seed=1,
            cases=[CaseSpec.parse("clock_jump@before_retry#1:600")],
            provider_window_s=300.0,
            worker_overrides=overrides,
            workdir=tmp_path,
        )
    )
    (case,) = result.cases
    check = case.invariants[NAME]
    assert check.status is verdict, check
    assert check.evidence["windows"]["provider_window_s"] == 300.0
    if verdict is Status.FAIL:
        assert check.evidence["windows"]["ledger_declared_key_windows_s"] == [DAY]
        (late,) = check.evidence["dynamic"]["reused_after_window"]
        assert late["window_s"] == 300.0
        assert late["late_by_s"] >= 299.0


def test_with_no_dedupe_a_resend_after_acceptance_is_the_duplicates_not_the_windows() -> None:
    """Window 0 s (a provider that remembers no key): posting again after the provider
    accepted (the outbox example's crash) is a duplicate, exactly_once_effect's to flag, not a
    retry past a window; a retry after a failed use is still flagged (an acceptance may hide
    behind the failure), and so is a resend after acceptance past a real window."""
    no_dedupe = replace(SAFE, key_window_s=0.0, provider_window_s=0.0, max_attempts=1)
    resent = [_eff(1, 1000.0), _eff(2, 1000.5)]
    after_accept = run_checker(NAME, CHECKERS[NAME], _obs(resent, no_dedupe))
    assert after_accept.status is Status.PASS, after_accept
    assert len(after_accept.evidence["dynamic"]["resent_after_acceptance"]) == 1
    retried = [_eff(1, 1000.0, "failed_by_fault"), _eff(2, 1000.5)]
    assert run_checker(NAME, CHECKERS[NAME], _obs(retried, no_dedupe)).status is Status.FAIL
    short = replace(no_dedupe, provider_window_s=0.4)
    assert run_checker(NAME, CHECKERS[NAME], _obs(resent, short)).status is Status.FAIL


def test_with_no_dedupe_the_providers_own_expired_verdict_on_a_resend_is_the_duplicates() -> None:
    """The provider logs a resend after acceptance as expired_then_accepted when its window
    is 0 s: still a duplicate (exactly_once_effect's), not a window kept or broken."""
    no_dedupe = replace(SAFE, key_window_s=0.0, provider_window_s=0.0, max_attempts=1)
    resent = [_eff(1, 1000.0), _eff(2, 1030.0, "expired_then_accepted")]
    result = run_checker(NAME, CHECKERS[NAME], _obs(resent, no_dedupe))
    assert result.status is Status.PASS, result
    keyed = run_checker(
        NAME, CHECKERS[NAME], _obs(resent, replace(no_dedupe, provider_window_s=5.0))
    )
    assert keyed.status is Status.FAIL  # past a real 5 s window it is the window's too
