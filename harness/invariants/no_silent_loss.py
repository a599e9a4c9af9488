"""``no_silent_loss``: every intended destination ends ``delivered``, ``failed``, ``unknown``
or ``review``; nothing is simply gone.

Intent comes from the scenario, not from the ledger, so a worker that forgets to write a
delivery row cannot hide the loss by forgetting consistently.
"""

from __future__ import annotations

from harness.invariants._model import CheckResult, Observation, Status, by_identity, need

NAME = "no_silent_loss"


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    groups = by_identity(ledger.deliveries)
    lost: list[dict[str, object]] = []
    for run_id, destinations in sorted(obs.intended.items()):
        for dest in destinations:
            rows = groups.get((run_id, dest), [])
            if not rows:
                why = (
                    "no delivery row" if run_id in ledger.committed_runs else "run never committed"
                )
                lost.append({"run_id": run_id, "destination": dest, "why": why})
            elif not any(r.settled for r in rows):
                lost.append(
                    {
                        "run_id": run_id,
                        "destination": dest,
                        "why": "never settled",
                        "states": {r.delivery_id: r.delivery_status for r in rows},
                    }
                )
    intended = sum(len(d) for d in obs.intended.values())
    if lost:
        return CheckResult(
            Status.FAIL,
            f"{len(lost)} of {intended} intended delivery(ies) silently lost",
            {"lost": lost},
        )
    return CheckResult(
        Status.PASS, f"all {intended} intended deliveries settled", {"intended": intended}
    )
