"""``accepted_reconciled_or_unknown``: every effect a provider accepted ends as ``delivered``
in the ledger, or as ``unknown``/``review``; never ``failed``, ``pending`` or missing.

Why: once the provider has accepted a message, the recipient has it. A ledger that then says
``failed`` invites an operator (or a retry job) to send it again, and one that says
``pending`` or has no row at all will resend or lose track of it. The only honest states are
``delivered`` (the acceptance was seen or reconciled by lookup) or ``unknown``/``review``
(the worker could not tell, and says so). The provider's log is the ground truth here, not
the worker's belief.
"""

from __future__ import annotations

from collections import Counter

from harness.invariants._attribution import unless_unattributed
from harness.invariants._evidence import effect_evidence
from harness.invariants._model import CheckResult, Observation, Status, need

NAME = "accepted_reconciled_or_unknown"

#: the ledger states that are honest about an accepted effect
_HONEST = ("delivered", "unknown", "review")


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    rows = {r.delivery_id: r for r in ledger.deliveries}
    # an effect tied to no delivery has no row to look up (named by unless_unattributed)
    accepted = [e for e in effects if e.accepted and (e.attributed or e.delivery_id)]
    ends: Counter[str] = Counter()
    problems: list[dict[str, object]] = []
    for eff in accepted:
        row = rows.get(eff.delivery_id)
        status = row.delivery_status if row is not None else "missing"
        ends[status] += 1
        if status in _HONEST:
            continue
        problems.append(
            {
                "delivery_id": eff.delivery_id,
                "run_id": eff.run_id,
                "destination": eff.destination,
                "ledger_status": status,
                "last_error": row.last_error if row is not None else None,
                "attempt_count": row.attempt_count if row is not None else None,
                "in_queue": eff.delivery_id in ledger.queue,
                "accepted_effect": effect_evidence(eff, obs),
                "why": (
                    "no ledger row for a delivery the provider accepted"
                    if row is None
                    else f"the provider accepted it but the ledger ends '{status}'"
                ),
            }
        )
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} accepted effect(s) not recorded as delivered, unknown or review",
            {"unreconciled": problems, "ledger_end_states": dict(ends)},
        )
    passed = CheckResult(
        Status.PASS,
        f"all {len(accepted)} accepted effect(s) end delivered, unknown or review",
        {"accepted_effects": len(accepted), "ledger_end_states": dict(ends)},
    )
    return unless_unattributed(passed, obs, "an accepted effect the ledger does not record")
