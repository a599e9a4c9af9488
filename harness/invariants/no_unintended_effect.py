"""``no_unintended_effect``: every accepted effect is placed on an intended (run, recipient)
delivery; one that names a run nobody intended, or a run that never intended that recipient,
while its recipient does have an intended delivery in the case, is a second message to that
recipient and fails.

Why apart from ``exactly_once_effect``: that checker counts effects per (run, recipient), so a
worker that sends each message once correctly and once more under a made-up run id, delivery
id and idempotency key makes one effect per pair twice over and passes it; the second copies
fall in pairs nobody intended, which no count looked at. This checker looks at exactly
those: it places each accepted effect as the providers logged it (after
``harness.invariants._attribution`` tied what the identification rule could not read) and
names every one it cannot place on an intended pair.

- Placed: the effect's run is intended and intends its recipient (the surface's normal form,
  ``harness.destinations``). A made-up delivery id or key under an intended run lands on that
  pair, where ``exactly_once_effect`` counts it (a second effect there fails that checker).
- Unintended (fails): its recipient has an intended delivery in the case, but its run was
  never intended, or its run does not intend that recipient. The evidence names each
  (provider, seq, recipient, run id, delivery id, key), the runs that did intend the
  recipient, and whether its delivery id is one of theirs.
- Elsewhere (not judged here): a recipient nobody in the case intended. Where a worker sends
  is ``frozen_destinations``' and ``credential_scope``'s to judge; counted in the evidence.
- Unplaced: the rule read no run and the harness could not tie one (several runs intend that
  recipient, and nothing names one of them). Never counted under an empty run: a case that
  would otherwise pass is *unknown*, as today.

With several providers every provider's log is placed against the one intent, and each
unintended effect names the provider that carried it.
"""

from __future__ import annotations

from harness.identities import delivery_id_for
from harness.invariants._attribution import unattributed_accepted, unless_unattributed
from harness.invariants._evidence import effect_evidence
from harness.invariants._model import CheckResult, EffectRow, Observation, Status, need, recipient

NAME = "no_unintended_effect"

#: the most unintended effects quoted one by one (the count is always whole)
SHOWN = 50


def intended_recipients(obs: Observation) -> dict[str, set[str]]:
    """Recipient (normal form) -> the runs that intend it."""
    runs_of: dict[str, set[str]] = {}
    for run_id, destinations in obs.intended.items():
        for dest in destinations:
            runs_of.setdefault(recipient(obs, dest), set()).add(run_id)
    return runs_of


def _intended_delivery_ids(obs: Observation) -> dict[str, set[str]]:
    """Recipient -> the delivery ids its intended deliveries go by: the derived id of each
    intended (run, destination), and the ledger's own row for that pair where it was read."""
    ids: dict[str, set[str]] = {}
    intended_pairs: set[tuple[str, str]] = set()
    for run_id, destinations in obs.intended.items():
        for dest in destinations:
            who = recipient(obs, dest)
            intended_pairs.add((run_id, who))
            ids.setdefault(who, set()).add(delivery_id_for(run_id, dest))
    rows = obs.ledger.deliveries if obs.ledger is not None else ()
    for row in rows:
        who = recipient(obs, row.destination)
        if (row.run_id, who) in intended_pairs:
            ids.setdefault(who, set()).add(row.delivery_id)
    return ids


def place(obs: Observation) -> tuple[list[EffectRow], list[EffectRow], list[EffectRow]]:
    """The case's accepted, attributed effects split three ways: (placed on an intended
    pair, unintended to a recipient with an intended delivery, to a recipient nobody in the
    case intended). The unattributed are ``_attribution.unattributed_accepted``'s."""
    runs_of = intended_recipients(obs)
    placed: list[EffectRow] = []
    unintended: list[EffectRow] = []
    elsewhere: list[EffectRow] = []
    for eff in obs.effects or ():
        if not (eff.accepted and eff.attributed):
            continue
        owners = runs_of.get(recipient(obs, eff.destination))
        if not owners:
            elsewhere.append(eff)
        elif eff.run_id in owners:
            placed.append(eff)
        else:
            unintended.append(eff)
    return placed, unintended, elsewhere


def tally(obs: Observation) -> dict[str, dict[str, int]]:
    """Provider -> its accepted effects placed on an intended delivery (``on_intended``) and
    those under a run or delivery nobody intended to an intended recipient (``unintended``):
    what a report shows beside intended and accepted. Empty when the logs were not read."""
    if obs.effects is None:
        return {}
    placed, unintended, _ = place(obs)
    out: dict[str, dict[str, int]] = {}
    for eff in obs.effects:
        out.setdefault(eff.provider, {"on_intended": 0, "unintended": 0})
    for key, effects in (("on_intended", placed), ("unintended", unintended)):
        for eff in effects:
            out[eff.provider][key] += 1
    return out


def _named(eff: EffectRow, obs: Observation, ids: dict[str, set[str]]) -> dict[str, object]:
    who = recipient(obs, eff.destination)
    owners = sorted(intended_recipients(obs).get(who, set()))
    return {
        **effect_evidence(eff, obs),
        "recipient": who,
        "why": (
            "run never intended"
            if eff.run_id not in obs.intended
            else "its run does not intend this recipient"
        ),
        "intended_runs_for_recipient": owners,
        "delivery_id_intended": eff.delivery_id in ids.get(who, set()),
    }


def check(obs: Observation) -> CheckResult:
    need(obs.effects, "provider effect log")
    placed, unintended, elsewhere = place(obs)
    counts: dict[str, object] = {
        "accepted_effects": len(placed) + len(unintended) + len(elsewhere),
        "placed": len(placed),
        **({"elsewhere": len(elsewhere)} if elsewhere else {}),
    }
    if unintended:
        ids = _intended_delivery_ids(obs)
        per_recipient: dict[str, int] = {}
        for eff in unintended:
            who = recipient(obs, eff.destination)
            per_recipient[who] = per_recipient.get(who, 0) + 1
        named = ", ".join(f"{who} ({n})" for who, n in sorted(per_recipient.items()))
        through = sorted({e.provider for e in unintended if e.provider})
        left_out = unattributed_accepted(obs)
        return CheckResult(
            Status.FAIL,
            f"{len(unintended)} accepted effect(s) under a run or delivery nobody intended"
            f" reached {len(per_recipient)} recipient(s) with an intended delivery: {named}"
            + (f" (through provider {', '.join(through)})" if through else ""),
            {
                "unintended": [_named(e, obs, ids) for e in unintended[:SHOWN]],
                "unintended_count": len(unintended),
                "recipients": per_recipient,
                **counts,
                **({"unattributed_effects": len(left_out)} if left_out else {}),
            },
        )
    passed = CheckResult(
        Status.PASS,
        f"{len(placed)} accepted effect(s), each on an intended delivery"
        + (f" ({len(elsewhere)} to recipients nobody in the case intended)" if elsewhere else ""),
        counts,
    )
    return unless_unattributed(passed, obs, "a message nobody intended to an intended recipient")
