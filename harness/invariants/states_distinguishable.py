"""``states_distinguishable``: pending, delivered, failed and unknown (plus the transitional
claimed and the operator's review) are distinct states an operator can query.

Why: the seed article's root cause is one fuzzy flag standing for several truths. If a
dropped reply is written down as ``failed``, or a state exists only in a worker's memory, an
operator cannot tell "sent, not confirmed" from "never sent" and will resend or give up
wrongly. So every ledger row is in exactly one documented state, the operator's own
``GROUP BY delivery_status`` query agrees with the rows, a delivery whose provider outcome is
ambiguous (its only accepted effect lost its reply, and nothing reconciled it) is not
recorded as ``failed``, and every ``failed`` row says why.

The end state is not the whole story: a worker that writes ``pending`` where it means
``unknown`` still reconciles before resending and ends ``delivered``, yet while the reply
was in doubt an operator asking for unknown deliveries found none (and one cancelling
pending ones cancelled a message that had gone out). So where the ledger keeps a status
history written by the database itself (the reference schema's trigger), every status ever
held must be documented, and a delivery whose accepted request lost its reply must have been
recorded ``unknown`` if it was recorded ``pending`` or ``failed`` after its first claim. The
history does not survive a restore from backup intact, so after a ``restore`` that part
is not judged (the evidence says so).
"""

from __future__ import annotations

from collections import Counter

from harness.invariants._evidence import effect_evidence, events_named
from harness.invariants._model import (
    CheckResult,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Status,
    StatusChange,
    need,
)
from harness.names import DELIVERY_STATES

NAME = "states_distinguishable"

#: a provider fault after which the worker cannot know whether its request was accepted
_AMBIGUOUS_FAULT = "accept_then_drop"


def _answered(eff: EffectRow) -> bool:
    """The worker got a reply that says the key was accepted (fresh or replayed)."""
    return eff.outcome in ("fresh", "expired_then_accepted", "deduplicated") and eff.fault is None


def _history_problems(
    obs: Observation, ledger: LedgerSnapshot, by_delivery: dict[str, list[EffectRow]]
) -> tuple[list[dict[str, object]], dict[str, object]]:
    """What the database's own status history shows that the end state cannot."""
    history = ledger.status_history
    if history is None:
        return [], {"judged": False, "why": "this ledger adapter keeps no status history"}
    if events_named(obs.trace, "restore"):
        return [], {"judged": False, "why": "a restore from backup rewrote the history"}
    problems: list[dict[str, object]] = []
    per_delivery: dict[str, list[StatusChange]] = {}
    for change in history:
        per_delivery.setdefault(change.delivery_id, []).append(change)
    for status in sorted({c.delivery_status for c in history} - set(DELIVERY_STATES)):
        problems.append(
            {
                "problem": "a delivery was, for a while, in an undocumented state",
                "state": status,
                "delivery_ids": sorted(
                    {c.delivery_id for c in history if c.delivery_status == status}
                ),
                "documented": list(DELIVERY_STATES),
            }
        )
    for delivery_id, mine in sorted(by_delivery.items()):
        dropped = [e for e in mine if e.accepted and e.fault == _AMBIGUOUS_FAULT]
        if not dropped:
            continue
        statuses = [c.delivery_status for c in per_delivery.get(delivery_id, [])]
        after_claim = statuses[statuses.index("claimed") + 1 :] if "claimed" in statuses else []
        in_doubt_as = [s for s in after_claim if s in ("pending", "failed")]
        if in_doubt_as and "unknown" not in statuses:
            problems.append(
                {
                    "problem": "the provider accepted a request whose reply was lost, and the "
                    f"ledger recorded it as {in_doubt_as[0]!r}, never 'unknown': an operator "
                    "could not query the in-doubt send apart from one that never left",
                    "delivery_id": delivery_id,
                    "status_history": statuses,
                    "accepted_effect": effect_evidence(dropped[0], obs),
                }
            )
    return problems, {"judged": True, "changes": len(history)}


def check(obs: Observation) -> CheckResult:
    ledger = need(obs.ledger, "ledger")
    effects = need(obs.effects, "provider effect log")
    problems: list[dict[str, object]] = []
    counts = Counter(r.delivery_status for r in ledger.deliveries)

    for status in sorted(set(counts) - set(DELIVERY_STATES)):
        problems.append(
            {
                "problem": "undocumented state",
                "state": status,
                "delivery_ids": [
                    r.delivery_id for r in ledger.deliveries if r.delivery_status == status
                ],
                "documented": list(DELIVERY_STATES),
            }
        )
    seen = Counter(r.delivery_id for r in ledger.deliveries)
    for delivery_id, n in sorted(seen.items()):
        if n > 1:
            problems.append(
                {
                    "problem": "one delivery in more than one row (more than one state)",
                    "delivery_id": delivery_id,
                    "states": [
                        r.delivery_status for r in ledger.deliveries if r.delivery_id == delivery_id
                    ],
                }
            )

    by_delivery: dict[str, list[EffectRow]] = {}
    for eff in effects:
        by_delivery.setdefault(eff.delivery_id, []).append(eff)
    reconciled = {a.delivery_id for a in ledger.audit if a.event == "reconciled"}
    for row in ledger.deliveries:
        if row.delivery_status != "failed":
            continue
        if not row.last_error:
            problems.append(
                {
                    "problem": "'failed' without a reason (last_error is empty)",
                    "delivery_id": row.delivery_id,
                    "run_id": row.run_id,
                    "destination": row.destination,
                }
            )
        mine = by_delivery.get(row.delivery_id, [])
        accepted = [e for e in mine if e.accepted]
        if (
            len(accepted) == 1
            and accepted[0].fault == _AMBIGUOUS_FAULT
            and not any(_answered(e) for e in mine if e.seq > accepted[0].seq)
            and row.delivery_id not in reconciled
        ):
            problems.append(
                {
                    "problem": "an ambiguous outcome (reply lost after acceptance) recorded as "
                    "'failed' instead of 'unknown'",
                    "delivery_id": row.delivery_id,
                    "run_id": row.run_id,
                    "destination": row.destination,
                    "last_error": row.last_error,
                    "accepted_effect": effect_evidence(accepted[0], obs),
                }
            )

    history_problems, history = _history_problems(obs, ledger, by_delivery)
    problems += history_problems

    operator: dict[str, object]
    if ledger.state_counts is None:
        operator = {"query": "not run by this ledger adapter"}
    else:
        queried = {k: v for k, v in ledger.state_counts.items() if v}
        from_rows = dict(counts)
        operator = {"query": "GROUP BY delivery_status", "counts": queried}
        if queried != from_rows:
            problems.append(
                {
                    "problem": "the operator's query disagrees with the rows",
                    "query_counts": queried,
                    "row_counts": from_rows,
                }
            )
    states = {s: counts.get(s, 0) for s in DELIVERY_STATES}
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} problem(s) telling delivery states apart",
            {
                "problems": problems,
                "states": states,
                "operator_view": operator,
                "status_history": history,
            },
        )
    return CheckResult(
        Status.PASS,
        f"{len(ledger.deliveries)} row(s), each in one documented state",
        {"states": states, "operator_view": operator, "status_history": history},
    )
