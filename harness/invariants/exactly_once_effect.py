"""``exactly_once_effect``: the providers' logs show at most one effect per (run, recipient),
and exactly one for every delivery the ledger calls ``delivered``.

With several providers (``[provider.NAME]``) the count is across all of them: a recipient
reached once by the webhook and once by the e-mail provider for one run was reached twice,
and each duplicate names the providers that carried it.

Counts what the provider accepted, not what the worker believes: a green local ledger with a
second effect at the recipient is exactly the bug this tool exists to find.

A recipient is a destination in the surface's normal form (``harness.destinations``): two
accepted effects for one run to ``Alice@Example.com `` and ``alice@example.com`` on an
e-mail surface reached one person twice, and the evidence names both spellings.

An effect the provider's rule could not tie to a run, and the harness could not either
(``harness.invariants._attribution``), is never counted under an empty run: it is left out
of the pairs and named in the evidence, and a case that would otherwise pass is *unknown*
(it could be a second effect of any run to that recipient).
"""

from __future__ import annotations

from harness.invariants._attribution import unattributed_accepted, unless_unattributed
from harness.invariants._model import CheckResult, Observation, Status, need, recipient

NAME = "exactly_once_effect"


def _providers(duplicate: dict[str, object]) -> list[str]:
    found = duplicate.get("providers")
    return [str(p) for p in found] if isinstance(found, list) else []


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    accepted: dict[tuple[str, str], list[dict[str, object]]] = {}
    for eff in effects:
        if eff.accepted and eff.attributed:
            accepted.setdefault((eff.run_id, recipient(obs, eff.destination)), []).append(
                eff.to_json()
            )
    #: several providers (``[provider.NAME]``): effects are counted across all of them, and
    #: each duplicate names the provider(s) it reached the recipient through
    several = bool(obs.policy is not None and obs.policy.providers)
    duplicates = []
    for (run, who), effs in sorted(accepted.items()):
        if len(effs) < 2:
            continue
        spellings = sorted({str(e["destination"]) for e in effs})
        duplicate: dict[str, object] = {
            "run_id": run,
            "destination": spellings[0],
            "effects": effs,
        }
        if len(spellings) > 1:
            duplicate["spellings"] = spellings
            duplicate["normal_form"] = who
        if several:
            duplicate["providers"] = sorted({str(e.get("provider", "")) for e in effs})
        duplicates.append(duplicate)

    def effects_for(run_id: str, destination: str) -> int:
        return len(accepted.get((run_id, recipient(obs, destination)), []))

    unbacked = [
        {
            "delivery_id": row.delivery_id,
            "run_id": row.run_id,
            "destination": row.destination,
            "accepted_effects": effects_for(row.run_id, row.destination),
        }
        for row in ledger.deliveries
        if row.delivery_status == "delivered" and effects_for(row.run_id, row.destination) != 1
    ]
    total = sum(len(v) for v in accepted.values())
    left_out = unattributed_accepted(obs)
    if duplicates or unbacked:
        parts = []
        if duplicates:
            respelled = sum(1 for d in duplicates if "spellings" in d)
            through = sorted({p for d in duplicates for p in _providers(d)})
            parts.append(
                f"{len(duplicates)} destination(s) received more than one effect"
                + (f" ({respelled} under two or more spellings)" if respelled else "")
                + (f" (through provider {', '.join(through)})" if through else "")
            )
        if unbacked:
            parts.append(f"{len(unbacked)} 'delivered' row(s) without exactly one effect")
        return CheckResult(
            Status.FAIL,
            "; ".join(parts),
            {
                "duplicates": duplicates,
                "delivered_without_one_effect": unbacked,
                "accepted_effects": total,
                **({"unattributed_effects": len(left_out)} if left_out else {}),
            },
        )
    passed = CheckResult(
        Status.PASS,
        f"{total} accepted effect(s), none repeated",
        {"accepted_effects": total},
    )
    return unless_unattributed(passed, obs, "a second effect to one recipient")
