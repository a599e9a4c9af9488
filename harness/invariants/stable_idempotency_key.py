"""``stable_idempotency_key``: every attempt of a delivery uses the key the ledger froze for it.

Read from the provider's log of every request (deduplicated and failed ones included), and
compared with the ledger: each request's key must be the delivery row's ``idempotency_key``.
A key minted per attempt turns the provider's dedupe into decoration, and so does a key that
never changes but is not the one the ledger holds: a lookup after a timeout, or a worker
restarted from the ledger, asks about (and resends with) the ledger's key, which the provider
has never seen. Both are failures, each naming the keys sent and the ledger's key.

Where the provider takes no key (chat, SMTP: what it logs is a header or a Message-ID built
from the key, not a key it dedupes), or the system has no ledger adapter (no rows to read at
all), only the stability part is judged, and the evidence says why. A delivery the
provider received but whose ledger row is missing, or records no key, cannot be compared:
that is an *unknown* (unless something else already failed), never a pass.

A worker that sends no delivery id of its own (an unchanged worker posting its webhook) has
its requests grouped by what the provider read instead, the run and the destination: two
deliveries are never taken for one delivery with two keys.
"""

from __future__ import annotations

from typing import Any

from harness.invariants._attribution import unless_unattributed
from harness.invariants._evidence import effect_evidence
from harness.invariants._model import (
    CheckResult,
    EffectRow,
    Observation,
    Status,
    column_not_given,
    each_provider,
    need,
)

NAME = "stable_idempotency_key"

#: outcomes that carry the worker's key as sent (refused/unauthenticated never reached dedupe)
_KEYED = ("fresh", "deduplicated", "expired_then_accepted", "rejected", "failed_by_fault")
#: how many offending requests the evidence lists per delivery
_SHOWN = 5


def check(obs: Observation) -> CheckResult:
    several = each_provider(obs, check)  # each provider judged by its own promise
    if several is not None:
        return several
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    # No key the provider honours (chat, SMTP), or no ledger rows to read at all (a system
    # without a ledger adapter): only the stability part can be judged.
    not_compared_because = (
        "the provider takes no key"
        if obs.policy is not None and not obs.policy.provider_keys
        else ledger.no_rows_because or column_not_given(ledger, "idempotency_key")
    )
    compare = not_compared_because is None
    sent: dict[str, list[EffectRow]] = {}
    for eff in sorted(effects, key=lambda e: e.seq):
        # a request tied to no delivery and no run is left to the unattributed rule, never
        # lumped under an empty id with the others
        if eff.outcome in _KEYED and (eff.delivery_id or eff.run_id):
            sent.setdefault(_delivery(eff), []).append(eff)
    frozen = {row.delivery_id: row.idempotency_key for row in ledger.deliveries} if compare else {}
    unstable: list[dict[str, Any]] = []
    mismatched: list[dict[str, Any]] = []
    uncompared: list[dict[str, Any]] = []
    for delivery_id, requests in sorted(sent.items()):
        keys = list(dict.fromkeys(e.idempotency_key for e in requests))
        expected = frozen.get(delivery_id)
        if len(keys) > 1:
            unstable.append({"delivery_id": delivery_id, "keys_sent": keys, "ledger_key": expected})
        if not compare:
            continue
        if not expected:
            why = "no ledger row" if expected is None else "the ledger row records no key"
            uncompared.append({"delivery_id": delivery_id, "keys_sent": keys, "why": why})
            continue
        wrong = [e for e in requests if e.idempotency_key != expected]
        if wrong:
            mismatched.append(
                {
                    "delivery_id": delivery_id,
                    "ledger_key": expected,
                    "keys_sent": keys,
                    "requests_not_with_the_ledger_key": len(wrong),
                    "first_requests": [effect_evidence(e, obs) for e in wrong[:_SHOWN]],
                }
            )
    evidence: dict[str, Any] = {
        "deliveries_sent": len(sent),
        "compared_with_ledger": compare,
        "not_compared_because": not_compared_because,
        "unstable": unstable,
        "not_the_ledger_key": mismatched,
        "not_compared": uncompared,
    }
    if unstable or mismatched:
        parts = []
        if unstable:
            parts.append(f"{len(unstable)} delivery(ies) sent with more than one key")
        if mismatched:
            first = mismatched[0]
            sent_keys = ", ".join(repr(k) for k in first["keys_sent"] if k != first["ledger_key"])
            parts.append(
                f"{len(mismatched)} delivery(ies) sent with a key that is not the ledger's "
                f"(e.g. {first['delivery_id']}: sent {sent_keys}, ledger has "
                f"{first['ledger_key']!r})"
            )
        return CheckResult(Status.FAIL, "; ".join(parts), evidence)
    if uncompared:
        return CheckResult(
            Status.UNKNOWN,
            f"{len(uncompared)} delivery(ies) the provider received have no ledger key to "
            "compare with",
            evidence,
        )
    how = "the ledger's key" if compare else f"one key (not compared: {not_compared_because})"
    passed = CheckResult(Status.PASS, f"{len(sent)} delivery(ies) each sent with {how}", evidence)
    return unless_unattributed(passed, obs, "a second key for one delivery")


def _delivery(eff: EffectRow) -> str:
    """The delivery a request belongs to: its delivery id, or (none read) its run and
    destination."""
    return eff.delivery_id or f"run {eff.run_id} to {eff.destination}"
