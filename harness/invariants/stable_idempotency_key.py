"""``stable_idempotency_key``: every attempt of a delivery uses the same key.

Read from the provider's log of every request (deduplicated and failed ones included), and
compared with the key the ledger froze for the delivery: a key minted per attempt turns the
provider's dedupe into decoration.
"""

from __future__ import annotations

from harness.invariants._model import CheckResult, Observation, Status, need

NAME = "stable_idempotency_key"

#: outcomes that carry the worker's key as sent (refused/unauthenticated never reached dedupe)
_KEYED = ("fresh", "deduplicated", "expired_then_accepted", "rejected", "failed_by_fault")


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    sent: dict[str, list[str]] = {}
    for eff in effects:
        if eff.outcome in _KEYED:
            keys = sent.setdefault(eff.delivery_id, [])
            if eff.idempotency_key not in keys:
                keys.append(eff.idempotency_key)
    frozen = {row.delivery_id: row.idempotency_key for row in ledger.deliveries}
    unstable = []
    for delivery_id, keys in sorted(sent.items()):
        expected = frozen.get(delivery_id)
        if len(keys) > 1:
            unstable.append({"delivery_id": delivery_id, "keys_sent": keys, "ledger_key": expected})
    if unstable:
        return CheckResult(
            Status.FAIL,
            f"{len(unstable)} delivery(ies) sent with more than one key",
            {"unstable": unstable},
        )
    return CheckResult(
        Status.PASS, f"{len(sent)} delivery(ies) each used one key", {"deliveries_sent": len(sent)}
    )
