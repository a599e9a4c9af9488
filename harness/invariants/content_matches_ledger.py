"""``content_matches_ledger``: what the provider received for a delivery is the body the ledger
recorded for it.

Counting effects cannot see a message that reached the right recipient with the wrong text
(one recipient's statement sent to another, a stale template, a body rebuilt after a crash
from data that has changed since). On a surface where nothing in the visible text names the
delivery (a payments API), no other checker notices either.

Both sides are hashed in one normal form (``fake_providers.body_hash``, re-exported as
``harness.snapshot.body_hash``): the provider hashes the message text it read from the
request (the preset's text field, or SMTP's plain-text part), the ledger adapter hashes the
body it recorded (``DeliveryRow.body_hash``). Every accepted effect attributed to a delivery
row is compared with that row.

Where the ledger adapter gives no body, the system gives no evidence for this rule: *not
judged* (reported, never a pass). An accepted effect whose text the provider could not read
is *unknown*, with the effect named.
"""

from __future__ import annotations

from typing import Any

from harness.invariants._evidence import effect_evidence
from harness.invariants._model import (
    NOT_JUDGED,
    CheckResult,
    DeliveryRow,
    EffectRow,
    Observation,
    Status,
    need,
    no_rows,
    recipient,
)

NAME = "content_matches_ledger"

#: how many mismatches the evidence lists
_SHOWN = 10


def _row_of(
    obs: Observation,
    eff: EffectRow,
    by_id: dict[str, DeliveryRow],
    by_recipient: dict[tuple[str, str], list[DeliveryRow]],
) -> DeliveryRow | None:
    """The delivery row this effect belongs to: by delivery id, else the one row of its run
    and recipient."""
    if eff.delivery_id and eff.delivery_id in by_id:
        return by_id[eff.delivery_id]
    rows = by_recipient.get((eff.run_id, recipient(obs, eff.destination)), [])
    return rows[0] if len(rows) == 1 else None


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    blind = no_rows(ledger)
    if blind is not None:
        return blind
    rows = ledger.deliveries
    by_id = {row.delivery_id: row for row in rows}
    by_recipient: dict[tuple[str, str], list[DeliveryRow]] = {}
    for row in rows:
        by_recipient.setdefault((row.run_id, recipient(obs, row.destination)), []).append(row)
    compared = 0
    mismatched: list[dict[str, Any]] = []
    no_body: list[str] = []
    unreadable: list[dict[str, Any]] = []
    unmatched = 0
    for eff in effects:
        if not eff.accepted:
            continue
        found = _row_of(obs, eff, by_id, by_recipient)
        if found is None:
            unmatched += 1  # a delivery with no row: other invariants' to judge
            continue
        row = found
        if row.body_hash is None:
            no_body.append(row.delivery_id)
            continue
        if eff.body_hash is None:
            unreadable.append(effect_evidence(eff, obs))
            continue
        compared += 1
        if eff.body_hash != row.body_hash:
            mismatched.append(
                {
                    "delivery_id": row.delivery_id,
                    "run_id": row.run_id,
                    "destination": row.destination,
                    "ledger_body_hash": row.body_hash,
                    "received_body_hash": eff.body_hash,
                    "same_as_the_ledger_body_of": sorted(
                        r.delivery_id
                        for r in rows
                        if r.body_hash == eff.body_hash and r.delivery_id != row.delivery_id
                    ),
                    "effect": effect_evidence(eff, obs),
                }
            )
    evidence: dict[str, Any] = {
        "compared": compared,
        "mismatched": mismatched[:_SHOWN],
        "effects_without_a_ledger_row": unmatched,
    }
    if mismatched:
        first = mismatched[0]
        other = first["same_as_the_ledger_body_of"]
        return CheckResult(
            Status.FAIL,
            f"{len(mismatched)} of {compared} accepted effect(s) carried a body the ledger did "
            f"not record for that delivery (e.g. {first['delivery_id']} to "
            f"{first['destination']!r}"
            + (f": the body recorded for {other[0]}" if other else "")
            + ")",
            evidence,
        )
    if unreadable:
        evidence["effects_without_a_body_hash"] = unreadable[:_SHOWN]
        return CheckResult(
            Status.UNKNOWN,
            f"{len(unreadable)} accepted effect(s) carry no body the provider could read "
            "(no body_hash in its log)",
            evidence,
        )
    if no_body and not compared:
        evidence["rows_without_a_body"] = no_body[:_SHOWN]
        return CheckResult(
            Status.UNKNOWN,
            f"{NOT_JUDGED} the ledger adapter gives no body to compare "
            "(DeliveryRow.body_hash: harness.snapshot.body_hash of the recorded body)",
            evidence,
        )
    if no_body:
        evidence["rows_without_a_body"] = no_body[:_SHOWN]
        return CheckResult(
            Status.UNKNOWN,
            f"{len(no_body)} delivery row(s) record no body to compare with what the provider "
            "received",
            evidence,
        )
    return CheckResult(
        Status.PASS,
        f"{compared} accepted effect(s) carried the body the ledger recorded",
        evidence,
    )
