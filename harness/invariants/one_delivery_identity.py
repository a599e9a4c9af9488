"""``one_delivery_identity``: each committed run has exactly one durable delivery identity per
intended recipient (no more, no fewer, none for a destination nobody intended).

Recipients are destinations in the surface's normal form (``harness.destinations``): two
delivery rows for one run to two spellings of one address are two identities for one
person, and a roster that lists a person twice still intends one identity for them.
"""

from __future__ import annotations

from harness.destinations import normal_form
from harness.invariants._model import (
    CheckResult,
    Observation,
    Status,
    by_identity,
    need,
    surface_of,
)

NAME = "one_delivery_identity"


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    surface = surface_of(obs)
    groups = by_identity(ledger.deliveries, surface)
    wrong: list[dict[str, object]] = []
    for run_id in sorted(ledger.committed_runs):
        spelled: dict[str, list[str]] = {}
        for dest in obs.intended.get(run_id, ()):
            spelled.setdefault(normal_form(dest, surface), []).append(dest)
        for who, spellings in sorted(spelled.items()):
            rows = groups.get((run_id, who), [])
            if len(rows) != 1:
                pair: dict[str, object] = {
                    "run_id": run_id,
                    "destination": sorted(spellings)[0],
                    "delivery_ids": [r.delivery_id for r in rows],
                }
                row_spellings = sorted({r.destination for r in rows} | set(spellings))
                if len(row_spellings) > 1:
                    pair["spellings"] = row_spellings
                wrong.append(pair)
        for (r, who), rows in sorted(groups.items()):
            if r == run_id and who not in spelled:
                wrong.append(
                    {
                        "run_id": run_id,
                        "destination": rows[0].destination,
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
