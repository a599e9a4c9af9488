"""``retry_within_window``: no request reuses an idempotency key after the provider's dedupe
window for it has passed.

Why: a key only protects against duplicates while the provider remembers it. A retry that
lands after the window is a brand-new message to the provider, however stable the key.

Judged from what happened, by the provider's evidence alone: its log (each request's time on
the provider's clock, its key, the provider's own ``expired_then_accepted`` verdicts) and the
window the provider applies (``Policy.provider_window_s``: what the provider reports it runs
with, as the harness set it up). The worker's word plays no part: not the window it was told,
not the one its ledger rows declare (a worker that believes in a longer window than the
provider keeps must not pass by believing it), not its retry settings.

* a request accepted as ``expired_then_accepted`` is the direct sign;
* any keyed request received at or after the first request with that key plus the provider's
  window is a late reuse. The window is counted from the first time the key reached the
  provider, as the reference counts it from its first attempt: a worker cannot know which of
  its requests was accepted (a 5xx from a gateway may hide an acceptance behind it), so a
  late retry is unsafe whatever the first answer was.

A provider whose window is 0 s remembers no key. There, a resend after the provider
*accepted* the key (a worker that posts, crashes, and posts again on restart) is a duplicate,
not a retry past a window: it is listed apart (``resent_after_acceptance``) and left to
``exactly_once_effect``, so the verdict names the one invariant the bug breaks. A retry after
a refused or failed use is still flagged: an acceptance may hide behind the failure.

A reused key with no recorded provider window cannot be judged: *unknown* (unless the
provider answered it ``deduplicated``: its own word that it still knew the key).

The retry policy (backoff schedule, ``max_attempts``, each attempt's time budget) is still
read, as an *outlook* for a person: could its last attempt land past the provider's window?
It never decides the verdict. A long schedule is harmless in a worker that checks the window
before each resend (the reference goes to ``review``), and only what the worker then did
says whether it kept the window; the ``backoff_past_window`` mutant is caught by its backoff
actually running past a short window (scenario ``mutant-backoff-past-window``).
"""

from __future__ import annotations

from typing import Any

from harness.invariants._evidence import detail_of, effect_evidence, restore_seq
from harness.invariants._model import (
    CheckResult,
    EffectRow,
    Observation,
    Policy,
    Status,
    each_provider,
    need,
)

NAME = "retry_within_window"

#: outcomes whose request carried the worker's key into the provider's dedupe logic
_KEYED = ("fresh", "deduplicated", "expired_then_accepted", "rejected", "failed_by_fault")


def policy_outlook(policy: Policy, window: float | None) -> dict[str, Any]:
    """Can attempt n of the policy land outside the provider's window after the first?

    Advisory only: reported, never judged (see the module docstring)."""
    budget = policy.request_timeout_s if policy.request_timeout_s is not None else policy.lease_s
    backoff = policy.retry_backoff_s or (0.0,)

    def gap(after_attempt: int) -> float:
        return backoff[min(after_attempt, len(backoff)) - 1]

    # Attempt n starts after n-1 attempts (each up to ``budget``) and n-1 backoff gaps, and
    # its request may reach the provider up to ``budget`` later; attempt 1 opens the window.
    first_outside: int | None = None
    elapsed = 0.0
    latest = budget
    for n in range(2, max(policy.max_attempts, 1) + 1):
        elapsed += budget + gap(n - 1)
        latest = elapsed + budget
        if window is not None and latest >= window:
            first_outside = n
            break
    shown = [gap(n) for n in range(1, min(policy.max_attempts, 12))]
    return {
        "judged": False,
        "provider_window_s": window,
        "max_attempts": policy.max_attempts,
        "backoff_s_first_gaps": shown,
        "attempt_budget_s": budget,
        "attempt_budget_from": (
            "request_timeout_s" if policy.request_timeout_s is not None else "lease_s"
        ),
        "first_attempt_that_could_land_outside_window": first_outside,
        "worst_case_last_attempt_after_first_s": round(latest, 3),
    }


def dynamic_check(
    effects: tuple[EffectRow, ...],
    window: float | None,
    restore_cuts: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Did any request reuse a key after the provider's window, on the provider's clock?

    ``restore_cuts`` are the provider's last sequence numbers before each restore from
    backup. A reuse whose earlier uses all fell before such a cut and made no effect is the
    restored ledger's lost memory, not a retry the worker chose: it is listed apart and not
    flagged (a replayed *effect* is restore_no_replay's and exactly_once_effect's to flag).
    """
    uses: dict[tuple[str | None, str], list[EffectRow]] = {}
    expired: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    forgotten: list[dict[str, Any]] = []
    resent: list[dict[str, Any]] = []
    unwindowed = 0
    for eff in sorted(effects, key=lambda e: e.seq):
        if eff.outcome not in _KEYED:
            continue
        ident = (eff.credential_id, eff.idempotency_key)
        earlier = uses.setdefault(ident, [])
        forgotten_by_restore = _forgotten_by_restore(earlier, eff, restore_cuts)
        earlier.append(eff)
        opener = earlier[0]
        if window is not None and window <= 0 and any(e.accepted for e in earlier[:-1]):
            # a provider that remembers no key took it again: the duplicate's, not a window's
            resent.append({"effect": eff.to_json(), "accepted_before": opener.to_json()})
            continue
        if eff.outcome == "expired_then_accepted":  # the provider itself says: too late
            expired.append({"effect": eff.to_json(), "key_first_seen": opener.to_json()})
        if opener is eff:
            continue
        if window is None:
            # no window to judge by; a dedupe hit is the provider saying it still knew the key
            if eff.outcome != "deduplicated":
                unwindowed += 1
            continue
        if forgotten_by_restore:
            forgotten.append({"effect": eff.to_json(), "key_first_seen": opener.to_json()})
            continue
        if eff.received_at >= opener.received_at + window:
            late.append(
                {
                    "effect": eff.to_json(),
                    "key_first_seen": opener.to_json(),
                    "window_s": window,
                    "late_by_s": round(eff.received_at - opener.received_at - window, 3),
                }
            )
    return {
        "fired": bool(expired or late),
        "keys_seen": len(uses),
        "expired_then_accepted": expired,
        "reused_after_window": late,
        "repeats_without_known_window": unwindowed,
        "reused_after_restore_without_effect": forgotten,
        "resent_after_acceptance": resent,
    }


def _forgotten_by_restore(
    earlier: list[EffectRow], eff: EffectRow, restore_cuts: tuple[int, ...]
) -> bool:
    """Every earlier use of the key came before a restore that precedes ``eff``, and none of
    them made an effect."""
    if not earlier or any(e.accepted or e.outcome == "deduplicated" for e in earlier):
        return False
    last = max(e.seq for e in earlier)
    return any(last <= cut < eff.seq for cut in restore_cuts)


def check(obs: Observation) -> CheckResult:
    several = each_provider(obs, check)  # each provider judged by its own promise
    if several is not None:
        return several
    effects = need(obs.effects, "provider effect log")
    policy = obs.policy
    if policy is not None and not policy.provider_keys:
        # A key the provider ignores has no window: a resend there is safe only after an
        # inspection, and whether it duplicated is exactly_once_effect's question.
        return CheckResult(
            Status.PASS,
            "the provider has no idempotency keys: no window to keep",
            {"fired": [], "provider_keys": False},
        )
    window = policy.provider_window_s if policy is not None else None
    windows = {
        "provider_window_s": window,
        # the worker's word, for a person comparing: never used to judge
        "worker_told_key_window_s": policy.key_window_s if policy is not None else None,
        "ledger_declared_key_windows_s": sorted(
            {r.key_window_s for r in obs.ledger.deliveries if r.key_window_s is not None}
        )
        if obs.ledger is not None
        else None,
    }
    outlook: dict[str, Any] = (
        policy_outlook(policy, window)
        if policy is not None
        else {"judged": False, "why": "no retry policy was recorded"}
    )
    # judged per provider when there are several (``each_provider``): their own cuts
    mine = {e.provider for e in effects}
    provider = next(iter(mine)) if len(mine) == 1 else ""
    cuts = tuple(
        seq
        for ev in obs.trace
        if ev.event == "restore" and isinstance(seq := restore_seq(detail_of(ev), provider), int)
    )
    dynamic = dynamic_check(effects, window, cuts)
    evidence: dict[str, Any] = {"windows": windows, "dynamic": dynamic, "policy_outlook": outlook}
    if dynamic["fired"]:
        culprits = dynamic["expired_then_accepted"] + dynamic["reused_after_window"]
        for c in culprits:
            eff = next(e for e in effects if e.seq == c["effect"]["seq"])
            c["effect"] = effect_evidence(eff, obs)
        summary = (
            f"{len(dynamic['expired_then_accepted'])} request(s) accepted after their key "
            f"expired, {len(dynamic['reused_after_window'])} key reuse(s) at or after the "
            f"provider's {window}s window"
        )
        return CheckResult(Status.FAIL, summary, {"fired": ["dynamic"], **evidence})
    if dynamic["repeats_without_known_window"]:
        return CheckResult(
            Status.UNKNOWN,
            f"{dynamic['repeats_without_known_window']} key reuse(s), and no record of the "
            "window the provider applies to judge them by",
            {"fired": [], **evidence},
        )
    if window is not None:
        summary = f"{dynamic['keys_seen']} key(s) used inside the provider's {window}s window"
    else:  # no window recorded: every reuse was a dedupe hit, or there was none
        summary = f"{dynamic['keys_seen']} key(s), reused only where the provider deduplicated"
    first_out = outlook.get("first_attempt_that_could_land_outside_window")
    if first_out is not None:
        summary += (
            f"; its policy could put attempt {first_out} past the window (an outlook, not "
            "judged: no request was late)"
        )
    return CheckResult(Status.PASS, summary, {"fired": [], **evidence})
