"""``audit_survives_cleanup``: queue cleanup never removes the only record of a delivery.

Every delivery the audit trail or a provider has heard of must still have its ledger row,
every ledger row must have its ``enqueued`` event, and every ``delivered`` row the event
that says so.
"""

from __future__ import annotations

from harness.invariants._model import CheckResult, Observation, Status, need

NAME = "audit_survives_cleanup"


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    effects = need(obs.effects, "provider effect log")
    rows = {r.delivery_id: r for r in ledger.deliveries}
    events: dict[str, set[str]] = {}
    for ev in ledger.audit:
        events.setdefault(ev.delivery_id, set()).add(ev.event)
    problems: list[dict[str, object]] = []
    known_elsewhere = set(events) | {e.delivery_id for e in effects if e.accepted} | ledger.queue
    for delivery_id in sorted(known_elsewhere - set(rows)):
        problems.append({"delivery_id": delivery_id, "problem": "ledger row missing"})
    for delivery_id, row in sorted(rows.items()):
        seen = events.get(delivery_id, set())
        if "enqueued" not in seen:
            problems.append({"delivery_id": delivery_id, "problem": "no 'enqueued' audit event"})
        if row.delivery_status == "delivered" and "delivered" not in seen:
            problems.append({"delivery_id": delivery_id, "problem": "no 'delivered' audit event"})
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} delivery record(s) lost or unaudited",
            {"problems": problems},
        )
    return CheckResult(
        Status.PASS,
        f"{len(rows)} ledger row(s), all audited",
        {"ledger_rows": len(rows), "audit_events": len(ledger.audit)},
    )
