"""``delivered_has_receipt``: a ``delivered`` row is backed by the one accepted effect of *this*
delivery, and keeps the receipt the provider issued for it.

``exactly_once_effect`` counts effects per (run, recipient); it cannot see a row that says
``delivered`` while the id the provider returned was never stored (the receipt is lost for
good: nobody can look the message up, refund it or match a bounce to it), or was stored
wrong. This checker takes each ``delivered`` row and the accepted effect the provider logged
for the same run and recipient (destination in the surface's normal form), and asks:

- the effect is this delivery's: it carries the row's key, where the provider honours keys;
- where the provider issued a message id, the row's ``provider_message_id`` is that id
  (a NULL is a lost receipt, another value a wrong one).

A row with no accepted effect, or with two, is ``exactly_once_effect``'s to judge (listed
here under ``left_to_exactly_once_effect``), and one whose effect carries another key is
``stable_idempotency_key``'s (``left_to_stable_idempotency_key``): each mistake is failed
once, by the invariant that names it. A system without a ledger
adapter has no rows to read: *unknown* (not judged), never a pass.
"""

from __future__ import annotations

from typing import Any

from harness.invariants._evidence import effect_evidence
from harness.invariants._model import (
    CheckResult,
    DeliveryRow,
    EffectRow,
    Observation,
    Status,
    need,
    no_rows,
    recipient,
)

NAME = "delivered_has_receipt"

#: how many offending rows the evidence lists
_SHOWN = 10


def _keys_honoured(obs: Observation, eff: EffectRow) -> bool:
    """Whether the provider that logged ``eff`` dedupes by key (so its key names a delivery)."""
    policy = obs.policy
    if policy is None:
        return True
    own = policy.per_provider.get(eff.provider)
    return own.keys if own is not None else policy.provider_keys


def _other_key(obs: Observation, row: DeliveryRow, eff: EffectRow) -> bool:
    """Whether ``eff`` carries a key other than the row's on a provider that honours keys."""
    keyed = _keys_honoured(obs, eff) and eff.idempotency_key and row.idempotency_key
    return bool(keyed and eff.idempotency_key != row.idempotency_key)


def _problem(row: DeliveryRow, eff: EffectRow) -> str | None:
    if eff.provider_message_id is None:
        return None  # the provider issued no id: nothing to keep
    if row.provider_message_id is None:
        return "receipt lost: the provider issued an id, the row stores none"
    if row.provider_message_id != eff.provider_message_id:
        return "wrong receipt: the row stores an id the provider did not issue for it"
    return None


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    blind = no_rows(ledger)
    if blind is not None:
        return blind
    accepted: dict[tuple[str, str], list[EffectRow]] = {}
    for eff in effects:
        if eff.accepted:
            accepted.setdefault((eff.run_id, recipient(obs, eff.destination)), []).append(eff)
    delivered = [r for r in ledger.deliveries if r.delivery_status == "delivered"]
    bad: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    other_key: list[dict[str, Any]] = []
    for row in delivered:
        found = accepted.get((row.run_id, recipient(obs, row.destination)), [])
        if len(found) != 1:
            left.append({"delivery_id": row.delivery_id, "accepted_effects": len(found)})
            continue
        if _other_key(obs, row, found[0]):
            other_key.append(
                {
                    "delivery_id": row.delivery_id,
                    "ledger_key": row.idempotency_key,
                    "effect_key": found[0].idempotency_key,
                }
            )
            continue
        why = _problem(row, found[0])
        if why is not None:
            bad.append(
                {
                    "delivery_id": row.delivery_id,
                    "run_id": row.run_id,
                    "destination": row.destination,
                    "why": why,
                    "ledger_key": row.idempotency_key,
                    "ledger_provider_message_id": row.provider_message_id,
                    "effect": effect_evidence(found[0], obs),
                }
            )
    evidence: dict[str, Any] = {
        "delivered": len(delivered),
        "without_a_matching_receipt": bad[:_SHOWN],
        "left_to_exactly_once_effect": left[:_SHOWN],
        "left_to_stable_idempotency_key": other_key[:_SHOWN],
    }
    if bad:
        first = bad[0]
        return CheckResult(
            Status.FAIL,
            f"{len(bad)} of {len(delivered)} 'delivered' row(s) without the provider's receipt "
            f"(e.g. {first['delivery_id']}: {first['why']}; provider issued "
            f"{first['effect']['provider_message_id']!r}, ledger has "
            f"{first['ledger_provider_message_id']!r})",
            evidence,
        )
    judged = len(delivered) - len(left) - len(other_key)
    aside = [
        f"{len(left)} left to exactly_once_effect" if left else "",
        f"{len(other_key)} left to stable_idempotency_key" if other_key else "",
    ]
    said = "; ".join(a for a in aside if a)
    return CheckResult(
        Status.PASS,
        f"{judged} 'delivered' row(s) each backed by their effect and its receipt"
        + (f" ({said})" if said else ""),
        evidence,
    )
