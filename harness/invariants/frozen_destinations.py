"""``frozen_destinations``: each run's deliveries go exactly to the destination list frozen in
the transaction that committed its result, whatever the roster says after a restart.

Why: a roster is live data; it changes while a worker is down. A worker that recomputes the
list on restart adds recipients who were never meant to get this result, or drops some who
were, and two incarnations of one worker disagree about who the message was for. So the
frozen list must equal the roster as it stood when the run was requested (the scenario's
intent), and every delivery row and every accepted effect of the run must be on that list
(the scenario's copy of it, so a worker that rewrites its own frozen list is still caught).
Roster changes the harness made between crash and restart are quoted in the evidence.

Lists and destinations are compared by recipient (the surface's normal form,
``harness.destinations``): a roster that re-spells ``alice@example.com`` as
``Alice@Example.com`` after the crash still names Alice on an e-mail surface, so a delivery
to either spelling is on the list; on a surface with case-sensitive ids it is a new one.
"""

from __future__ import annotations

from harness.destinations import normal_set
from harness.invariants._evidence import detail_of, effect_evidence, events_named
from harness.invariants._model import CheckResult, Observation, Status, need, recipient, surface_of

NAME = "frozen_destinations"


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    effects = need(obs.effects, "provider effect log")
    frozen = ledger.frozen_destinations
    roster_changes = [
        {"t": ev.t, **detail_of(ev)} for _, ev in events_named(obs.trace, "roster_change")
    ]
    surface = surface_of(obs)
    added_later = normal_set(
        (d for change in roster_changes for d in change.get("added", [])), surface
    )
    problems: list[dict[str, object]] = []

    for run_id in sorted(ledger.committed_runs):
        if run_id not in frozen and obs.intended.get(run_id) == ():
            # its topic's roster was empty when it was requested: an empty list is frozen as
            # no rows at all, which a table cannot tell from none (every send of it is still
            # off its list, below)
            continue
        if run_id not in frozen:
            problems.append({"run_id": run_id, "problem": "committed without a frozen list"})
            continue
        intended = obs.intended.get(run_id)
        if intended is None:
            continue
        have, want = normal_set(frozen[run_id], surface), normal_set(intended, surface)
        if have != want:
            problems.append(
                {
                    "run_id": run_id,
                    "problem": "frozen list differs from the roster when the run was requested",
                    "frozen": sorted(frozen[run_id]),
                    "intended": sorted(intended),
                    "extra": sorted(d for d in frozen[run_id] if recipient(obs, d) not in want),
                    "missing": sorted(d for d in intended if recipient(obs, d) not in have),
                }
            )

    def list_for(run_id: str) -> tuple[str, ...] | None:
        # The scenario's record of the list is the reference: a worker that rewrites its own
        # frozen list must not thereby make a wrong delivery look right.
        return obs.intended.get(run_id, frozen.get(run_id))

    def off_list(run_id: str, destination: str) -> str | None:
        allowed = list_for(run_id)
        if allowed is None:
            return "run has no frozen destination list"
        who = recipient(obs, destination)
        if who not in normal_set(allowed, surface):
            why = "destination is not on the list frozen at commit"
            if who in added_later:
                why += " (it was added to the roster after the run was requested)"
            return why
        return None

    for row in ledger.deliveries:
        why = off_list(row.run_id, row.destination)
        if why is not None:
            problems.append(
                {
                    "run_id": row.run_id,
                    "problem": f"delivery row: {why}",
                    "delivery_id": row.delivery_id,
                    "destination": row.destination,
                    "status": row.delivery_status,
                    "created_by": row.created_by,
                    "frozen": sorted(list_for(row.run_id) or ()),
                }
            )
    for eff in effects:
        if not eff.accepted:
            continue
        why = off_list(eff.run_id, eff.destination)
        if why is not None:
            problems.append(
                {
                    "run_id": eff.run_id,
                    "problem": f"accepted effect: {why}",
                    "effect": effect_evidence(eff, obs),
                    "frozen": sorted(list_for(eff.run_id) or ()),
                }
            )
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} delivery(ies) or list(s) off the destinations frozen at commit",
            {"problems": problems, "roster_changes": roster_changes},
        )
    return CheckResult(
        Status.PASS,
        f"{len(ledger.committed_runs)} committed run(s) delivered to their frozen lists"
        + (f" despite {len(roster_changes)} roster change(s)" if roster_changes else ""),
        {
            "committed_runs": len(ledger.committed_runs),
            "frozen": {k: list(v) for k, v in sorted(frozen.items())},
            "roster_changes": roster_changes,
        },
    )
