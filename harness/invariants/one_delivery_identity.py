"""``one_delivery_identity``: each committed run has exactly one durable delivery identity per
intended destination (no more, no fewer, none for a destination nobody intended).
"""

from __future__ import annotations

from harness.invariants._model import CheckResult, Observation, Status, by_identity, need

NAME = "one_delivery_identity"


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    groups = by_identity(ledger.deliveries)
    wrong: list[dict[str, object]] = []
    for run_id in sorted(ledger.committed_runs):
        intended = set(obs.intended.get(run_id, ()))
        for dest in sorted(intended):
            ids = [r.delivery_id for r in groups.get((run_id, dest), [])]
            if len(ids) != 1:
                wrong.append({"run_id": run_id, "destination": dest, "delivery_ids": ids})
        for (r, dest), rows in sorted(groups.items()):
            if r == run_id and dest not in intended:
                wrong.append(
                    {
                        "run_id": run_id,
                        "destination": dest,
                        "unintended": True,
                        "delivery_ids": [x.delivery_id for x in rows],
                    }
                )
    if wrong:
        return CheckResult(
            Status.FAIL,
            f"{len(wrong)} (run, destination) pair(s) without exactly one identity",
            {"pairs": wrong},
        )
    return CheckResult(
        Status.PASS,
        f"{len(ledger.committed_runs)} committed run(s), one identity each",
        {"committed_runs": len(ledger.committed_runs)},
    )
