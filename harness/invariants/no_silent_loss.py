"""``no_silent_loss``: every intended destination ends ``delivered``, ``failed``, ``unknown``
or ``review``; nothing is simply gone.

Intent comes from the scenario, not from the ledger, so a worker that forgets to write a
delivery row cannot hide the loss by forgetting consistently.

A system plugged in without a ledger adapter has no state an operator could read, so it is
judged by the provider's log alone: an intended delivery the provider never accepted is lost
(nothing anywhere says it failed or is still pending).

Destinations are compared by recipient (the surface's normal form, ``harness.destinations``):
a row or effect to ``Alice@Example.com`` settles an intended ``alice@example.com`` on an
e-mail surface, and a roster listing one person under two spellings intends one delivery.
"""

from __future__ import annotations

from harness.destinations import distinct
from harness.invariants._attribution import unattributed_accepted, unattributed_evidence
from harness.invariants._model import (
    CheckResult,
    MissingEvidenceError,
    Observation,
    Status,
    by_identity,
    need,
    recipient,
    surface_of,
)

NAME = "no_silent_loss"


def _intended(obs: Observation) -> list[tuple[str, str]]:
    """(run, destination) for every intended recipient, one spelling each."""
    surface = surface_of(obs)
    return [
        (run_id, dest)
        for run_id, destinations in sorted(obs.intended.items())
        for dest in distinct(destinations, surface)
    ]


def _by_provider(obs: Observation, why_no_ledger: str) -> CheckResult:
    effects = need(obs.effects, "provider log")
    accepted = {(e.run_id, recipient(obs, e.destination)) for e in effects if e.accepted}
    left_out = unattributed_accepted(obs)
    #: recipients reached by an effect no rule tied to a run: it may be any of their runs'
    unplaced = {recipient(obs, e.destination) for e in left_out}
    pairs = _intended(obs)
    intended = len(pairs)
    missing = [
        {
            "run_id": run_id,
            "destination": dest,
            "why": "the provider never accepted it, and no ledger shows it failed or pending",
        }
        for run_id, dest in pairs
        if (run_id, recipient(obs, dest)) not in accepted
    ]
    lost = [m for m in missing if recipient(obs, str(m["destination"])) not in unplaced]
    maybe = [m for m in missing if m not in lost]
    evidence: dict[str, object] = {"judged_by": "provider log", "no_ledger": why_no_ledger}
    if left_out:
        evidence["unattributed"] = unattributed_evidence(left_out)
        evidence["maybe_delivered_by_unattributed"] = maybe
    if lost:
        return CheckResult(
            Status.FAIL,
            f"{len(lost)} of {intended} intended delivery(ies) never reached the provider",
            {"lost": lost, **evidence},
        )
    if maybe:
        return CheckResult(
            Status.UNKNOWN,
            f"{len(maybe)} of {intended} intended delivery(ies) have no attributed effect, but"
            f" their recipient got {len(left_out)} effect(s) the identification rule could not"
            " tie to a run",
            evidence,
        )
    return CheckResult(
        Status.PASS,
        f"all {intended} intended deliveries accepted by the provider (judged by its log)",
        {"intended": intended, **evidence},
    )


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    try:
        ledger.committed_runs  # noqa: B018 - a ledger without it cannot tell "failed" from "gone"
    except MissingEvidenceError as exc:
        return _by_provider(obs, str(exc))
    groups = by_identity(ledger.deliveries, surface_of(obs))
    lost: list[dict[str, object]] = []
    pairs = _intended(obs)
    for run_id, dest in pairs:
        rows = groups.get((run_id, recipient(obs, dest)), [])
        if not rows:
            why = "no delivery row" if run_id in ledger.committed_runs else "run never committed"
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
    intended = len(pairs)
    if lost:
        return CheckResult(
            Status.FAIL,
            f"{len(lost)} of {intended} intended delivery(ies) silently lost",
            {"lost": lost},
        )
    return CheckResult(
        Status.PASS, f"all {intended} intended deliveries settled", {"intended": intended}
    )
