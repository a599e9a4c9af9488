"""``no_silent_loss``: every intended destination ends ``delivered``, ``failed``, ``unknown``
or ``review``; nothing is simply gone.

Intent comes from the scenario, not from the ledger, so a worker that forgets to write a
delivery row cannot hide the loss by forgetting consistently.

A system plugged in without a ledger adapter has no state an operator could read, so it is
judged by the provider's log alone: an intended delivery the provider never accepted is lost
(nothing anywhere says it failed or is still pending).

A ``failed`` row is settled only if giving up was the answer's or the policy's decision: the
provider's last answer to the delivery was permanent (HTTP 4xx other than 408, 425 and 429;
SMTP 5xx), or the policy's attempts were spent (``Policy.max_attempts``, counted as the more
of the provider's requests for the delivery and the row's ``attempt_count``). A ``failed``
that follows a temporary answer (HTTP 408, 425, 429, 5xx; SMTP 4xx) with attempts left is a
silent loss too, named as such: the provider asked to be asked again, and nobody will
(``gave_up_on_a_temporary_answer``). A failed row the provider never answered is not judged
by this rule.

Destinations are compared by recipient (the surface's normal form, ``harness.destinations``):
a row or effect to ``Alice@Example.com`` settles an intended ``alice@example.com`` on an
e-mail surface, and a roster listing one person under two spellings intends one delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from harness.destinations import distinct
from harness.invariants._attribution import (
    IDENTIFY_FIX,
    unattributed_accepted,
    unattributed_evidence,
)
from harness.invariants._evidence import effect_evidence
from harness.invariants._model import (
    CheckResult,
    DeliveryRow,
    EffectRow,
    MissingEvidenceError,
    Observation,
    Status,
    by_identity,
    need,
    recipient,
    surface_of,
)

NAME = "no_silent_loss"

#: HTTP answers that mean "try again later" (RFC 9110: 408 Request Timeout, RFC 8470: 425 Too
#: Early, RFC 6585: 429 Too Many Requests; every 5xx)
_HTTP_TEMPORARY = frozenset({408, 425, 429})


def temporary(code: int, surface: str | None) -> bool:
    """Whether a provider's answer ``code`` asks to be retried: SMTP 4xx (RFC 5321 4.2.1),
    HTTP 408/425/429 and 5xx. Anything else that is not a success is permanent."""
    if surface == "smtp":
        return 400 <= code < 500
    return code in _HTTP_TEMPORARY or code >= 500


def _requests_by_recipient(obs: Observation) -> dict[tuple[str, str], list[EffectRow]]:
    """Every request the providers logged, by (run, recipient), in arrival order."""
    grouped: dict[tuple[str, str], list[EffectRow]] = {}
    for eff in sorted(obs.effects or (), key=lambda e: (e.received_at, e.seq)):
        grouped.setdefault((eff.run_id, recipient(obs, eff.destination)), []).append(eff)
    return grouped


def _gave_up_early(
    obs: Observation,
    rows: list[DeliveryRow],
    requests: Callable[[], dict[tuple[str, str], list[EffectRow]]],
) -> list[dict[str, object]]:
    """``failed`` rows whose last provider answer was temporary, with attempts left."""
    failed = [r for r in rows if r.delivery_status == "failed"]
    if not failed or obs.effects is None:
        return []
    surface = surface_of(obs)
    found: list[dict[str, object]] = []
    for row in failed:
        mine = requests().get((row.run_id, recipient(obs, row.destination)), [])
        code = mine[-1].status_code if mine else None
        if code is None:
            continue  # never answered (or no status to read): not this rule's to judge
        last = mine[-1]
        if last.accepted or not temporary(code, surface):
            continue
        if obs.policy is None:
            raise MissingEvidenceError(
                f"{row.delivery_id} failed after a temporary {last.status_code}, and the "
                "retry policy (max_attempts) was not recorded"
            )
        made = max(len(mine), row.attempt_count)
        if made >= obs.policy.max_attempts:
            continue
        found.append(
            {
                "run_id": row.run_id,
                "destination": row.destination,
                "delivery_id": row.delivery_id,
                "why": "gave_up_on_a_temporary_answer",
                "last_answer": last.status_code,
                "attempts_made": made,
                "max_attempts": obs.policy.max_attempts,
                "last_error": row.last_error,
                "last_request": effect_evidence(last, obs),
            }
        )
    return found


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
            f" tie to a run; {IDENTIFY_FIX}",
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
    requests = cache(lambda: _requests_by_recipient(obs))  # read once, only if a row failed
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
        elif all(r.delivery_status == "failed" for r in rows if r.settled):
            lost.extend(_gave_up_early(obs, rows, requests))
    intended = len(pairs)
    if lost:
        early = sum(1 for x in lost if x["why"] == "gave_up_on_a_temporary_answer")
        return CheckResult(
            Status.FAIL,
            f"{len(lost)} of {intended} intended delivery(ies) silently lost"
            + (f" ({early} 'failed' after a temporary answer with attempts left)" if early else ""),
            {"lost": lost},
        )
    return CheckResult(
        Status.PASS, f"all {intended} intended deliveries settled", {"intended": intended}
    )
