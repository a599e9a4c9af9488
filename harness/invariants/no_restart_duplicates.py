"""``no_restart_duplicates``: a restart never creates a second delivery item.

Looks for a (run, destination) that has more than one delivery identity where a later worker
incarnation minted one, the signature of rebuilding deliveries from a transcript on start-up.
A destination is a recipient in the surface's normal form (``harness.destinations``), so a
restart that mints a second item under another spelling of one address is caught too.
"""

from __future__ import annotations

from harness.invariants._model import (
    NOT_JUDGED,
    CheckResult,
    MissingEvidenceError,
    Observation,
    Status,
    by_identity,
    need,
    surface_of,
)

NAME = "no_restart_duplicates"


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    every = ledger.deliveries  # a refused ledger says so here
    if ledger.no_rows_because is not None:  # no items at all: nothing a pass could rest on
        raise MissingEvidenceError(f"{NOT_JUDGED} ledger deliveries: {ledger.no_rows_because}")
    offending: list[dict[str, object]] = []
    for (run_id, _), rows in sorted(by_identity(every, surface_of(obs)).items()):
        creators = {r.created_by for r in rows}
        if len(rows) > 1 and len(creators) > 1:
            offending.append(
                {
                    "run_id": run_id,
                    "destination": min(r.destination for r in rows),
                    "items": [
                        {
                            "delivery_id": r.delivery_id,
                            "created_by": r.created_by,
                            "status": r.delivery_status,
                        }
                        for r in sorted(rows, key=lambda r: r.created_at)
                    ],
                }
            )
    if offending:
        return CheckResult(
            Status.FAIL,
            f"a restarted worker created a second delivery item for {len(offending)} "
            "destination(s)",
            {"duplicated": offending},
        )
    return CheckResult(
        Status.PASS, "no restart created a delivery item twice", {"workers": list(obs.workers)}
    )
