"""``exactly_once_effect``: the providers' logs show at most one effect per (run, destination),
and exactly one for every delivery the ledger calls ``delivered``.

Counts what the provider accepted, not what the worker believes: a green local ledger with a
second effect at the recipient is exactly the bug this tool exists to find.
"""

from __future__ import annotations

from harness.invariants._model import CheckResult, Observation, Status, need

NAME = "exactly_once_effect"


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    accepted: dict[tuple[str, str], list[dict[str, object]]] = {}
    for eff in effects:
        if eff.accepted:
            accepted.setdefault((eff.run_id, eff.destination), []).append(eff.to_json())
    duplicates = [
        {"run_id": run, "destination": dest, "effects": effs}
        for (run, dest), effs in sorted(accepted.items())
        if len(effs) > 1
    ]
    unbacked = [
        {
            "delivery_id": row.delivery_id,
            "run_id": row.run_id,
            "destination": row.destination,
            "accepted_effects": len(accepted.get((row.run_id, row.destination), [])),
        }
        for row in ledger.deliveries
        if row.delivery_status == "delivered"
        and len(accepted.get((row.run_id, row.destination), [])) != 1
    ]
    total = sum(len(v) for v in accepted.values())
    if duplicates or unbacked:
        parts = []
        if duplicates:
            parts.append(f"{len(duplicates)} destination(s) received more than one effect")
        if unbacked:
            parts.append(f"{len(unbacked)} 'delivered' row(s) without exactly one effect")
        return CheckResult(
            Status.FAIL,
            "; ".join(parts),
            {
                "duplicates": duplicates,
                "delivered_without_one_effect": unbacked,
                "accepted_effects": total,
            },
        )
    return CheckResult(
        Status.PASS,
        f"{total} accepted effect(s), none repeated",
        {"accepted_effects": total},
    )
