"""``retry_within_window``: no attempt reuses an idempotency key after the provider's dedupe
window for it has passed, and the retry policy cannot make one do so.

Why: a key only protects against duplicates while the provider remembers it. A retry that
lands after the window is a brand-new message to the provider, however stable the key. So the
invariant is checked twice:

* statically, from the policy: with the worker's backoff schedule and ``max_attempts``, and
  each attempt allowed its full time budget (the request timeout, or the lease if none is
  recorded), can the last attempt land outside ``key_window_s`` after the first? Uncapped
  exponential backoff over many attempts fails here without a single day being waited;
* dynamically, from the provider's log (provider clock): a request accepted as
  ``expired_then_accepted`` is the direct sign, and any keyed request received at or after
  the first request with that key plus the window is a late reuse. The window is counted from
  the first time the key reached the provider, as the reference counts it from its first
  attempt: a worker cannot know which of its requests was accepted (a 5xx from a gateway may
  hide an acceptance behind it), so a late retry is unsafe whatever the first answer was.

Evidence always carries both parts, and says which one fired.
"""

from __future__ import annotations

from typing import Any

from harness.invariants._evidence import detail_of, effect_evidence
from harness.invariants._model import CheckResult, EffectRow, Observation, Policy, Status, need

NAME = "retry_within_window"

#: outcomes whose request carried the worker's key into the provider's dedupe logic
_KEYED = ("fresh", "deduplicated", "expired_then_accepted", "rejected", "failed_by_fault")


def static_check(policy: Policy) -> dict[str, Any]:
    """Can attempt n of the policy land outside the window after the first attempt?"""
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
        if latest >= policy.key_window_s:
            first_outside = n
            break
    shown = [gap(n) for n in range(1, min(policy.max_attempts, 12))]
    return {
        "fired": first_outside is not None,
        "key_window_s": policy.key_window_s,
        "max_attempts": policy.max_attempts,
        "backoff_s_first_gaps": shown,
        "attempt_budget_s": budget,
        "attempt_budget_from": (
            "request_timeout_s" if policy.request_timeout_s is not None else "lease_s"
        ),
        "first_attempt_outside_window": first_outside,
        "worst_case_last_attempt_after_first_s": round(latest, 3),
    }


def dynamic_check(
    effects: tuple[EffectRow, ...],
    window_of: dict[str, float],
    default_window: float | None,
    restore_cuts: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Did any request reuse a key after its window, on the provider's clock?

    ``restore_cuts`` are the provider's last sequence numbers before each restore from
    backup. A reuse whose earlier uses all fell before such a cut and made no effect is the
    restored ledger's lost memory, not a retry the worker chose: it is listed apart and not
    flagged (a replayed *effect* is restore_no_replay's and exactly_once_effect's to flag).
    """
    uses: dict[tuple[str | None, str], list[EffectRow]] = {}
    expired: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    forgotten: list[dict[str, Any]] = []
    unwindowed = 0
    for eff in sorted(effects, key=lambda e: e.seq):
        if eff.outcome not in _KEYED:
            continue
        ident = (eff.credential_id, eff.idempotency_key)
        earlier = uses.setdefault(ident, [])
        forgotten_by_restore = _forgotten_by_restore(earlier, eff, restore_cuts)
        earlier.append(eff)
        opener = earlier[0]
        if eff.outcome == "expired_then_accepted":  # the provider itself says: too late
            expired.append({"effect": eff.to_json(), "key_first_seen": opener.to_json()})
        if opener is eff:
            continue
        window = window_of.get(eff.delivery_id, default_window)
        if window is None:
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
    window_of: dict[str, float] = {}
    if obs.ledger is not None:
        window_of = {
            r.delivery_id: r.key_window_s
            for r in obs.ledger.deliveries
            if r.key_window_s is not None
        }
    static: dict[str, Any] = (
        static_check(policy)
        if policy is not None
        else {"fired": False, "checked": False, "why": "no retry policy was recorded"}
    )
    cuts = tuple(
        seq
        for ev in obs.trace
        if ev.event == "restore" and isinstance(seq := detail_of(ev).get("effects_seq"), int)
    )
    dynamic = dynamic_check(effects, window_of, policy.key_window_s if policy else None, cuts)
    evidence = {"static": static, "dynamic": dynamic}
    fired = [name for name, part in evidence.items() if part["fired"]]
    if fired:
        if "dynamic" in fired:
            culprits = dynamic["expired_then_accepted"] + dynamic["reused_after_window"]
            for c in culprits:
                eff = next(e for e in effects if e.seq == c["effect"]["seq"])
                c["effect"] = effect_evidence(eff, obs)
        parts = []
        if static["fired"]:
            parts.append(
                f"policy lets attempt {static['first_attempt_outside_window']} land "
                f"{static['worst_case_last_attempt_after_first_s']}s after the first, past the "
                f"{static['key_window_s']}s key window"
            )
        if dynamic["fired"]:
            parts.append(
                f"{len(dynamic['expired_then_accepted'])} request(s) accepted after their key "
                f"expired, {len(dynamic['reused_after_window'])} key reuse(s) after the window"
            )
        return CheckResult(Status.FAIL, "; ".join(parts), {"fired": fired, **evidence})
    summary = f"{dynamic['keys_seen']} key(s) used inside their window"
    if policy is not None:
        summary += (
            f"; policy's worst case {static['worst_case_last_attempt_after_first_s']}s "
            f"< {policy.key_window_s}s window"
        )
    return CheckResult(Status.PASS, summary, {"fired": [], **evidence})
