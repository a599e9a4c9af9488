"""Which intended delivery each logged request is, when the provider's rule could not say.

A real worker sends what its provider documents and nothing for a harness, so a provider's
identification rule may read the recipient but no run (a mail without ``X-Run-Id``), or the
run but no delivery id (a mail without ``X-Delivery-Id``). Such a request must still count,
never under an empty id shared by every other one (which made one "delivery" out of every
mail and failed ``stable_idempotency_key`` on a correct worker):

- a run and a destination but no delivery id: the delivery is ``delivery_id_for(run,
  destination)``, what ``Job`` and a ledger adapter use by default;
- no run, but the user's own id (the rule's ``delivery``) is an intended run that intends
  this recipient: that run (``joined_by="delivery"``);
- no run, and exactly one intended run intends this recipient (in the surface's normal
  form): that run (``joined_by="destination"``);
- otherwise it stays unattributed (empty run). The checkers it bears on count it apart and
  answer *unknown* when it could change their answer, never ignore it.
"""

from __future__ import annotations

from dataclasses import replace

from harness.destinations import normal_form
from harness.identities import delivery_id_for
from harness.invariants._model import CheckResult, EffectRow, Observation, Status, surface_of


def attribute(obs: Observation) -> Observation:
    """``obs`` with every effect attributed as far as the intent allows (see the module)."""
    if not obs.effects:
        return obs
    surface = surface_of(obs)
    runs_of: dict[str, set[str]] = {}
    for run_id, destinations in obs.intended.items():
        for dest in destinations:
            runs_of.setdefault(normal_form(dest, surface), set()).add(run_id)
    effects = tuple(_attributed(e, obs, runs_of, surface) for e in obs.effects)
    return replace(obs, effects=effects)


def _attributed(
    eff: EffectRow, obs: Observation, runs_of: dict[str, set[str]], surface: str | None
) -> EffectRow:
    if not eff.destination:
        return eff
    if not eff.run_id:
        who = normal_form(eff.destination, surface)
        candidates = runs_of.get(who, set())
        if eff.delivery_id and eff.delivery_id in candidates:
            eff = replace(eff, run_id=eff.delivery_id, joined_by="delivery")
        elif len(candidates) == 1:
            (run_id,) = candidates
            eff = replace(eff, run_id=run_id, joined_by="destination")
        else:
            return eff
    if not eff.delivery_id or eff.joined_by == "delivery":
        eff = replace(eff, delivery_id=delivery_id_for(eff.run_id, eff.destination))
    return eff


#: what makes a request attributable: the provider told where it names its run
IDENTIFY_FIX = (
    "tell the provider where a request names its run: [provider] options ="
    ' { identify = { run = "header:X-Run-Id" } }, or json:/path, or regex: over an'
    " e-mail's subject and text (docs/providers.md)"
)


def unattributed_accepted(obs: Observation) -> list[EffectRow]:
    """The effects that reached a recipient but could not be tied to any run."""
    return [e for e in obs.effects or () if e.accepted and not e.attributed]


def unattributed_evidence(effects: list[EffectRow], shown: int = 5) -> dict[str, object]:
    """What a checker says about the effects it could not attribute."""
    return {
        "count": len(effects),
        "first": [e.to_json() for e in effects[:shown]],
        "why": "the identification rule read no run, and neither the user's own id nor the"
        " recipient names exactly one intended run",
        "fix": IDENTIFY_FIX,
    }


def unless_unattributed(result: CheckResult, obs: Observation, what: str) -> CheckResult:
    """A pass becomes *unknown* while some effect could not be attributed: ``what`` (one of
    the unattributed effects could be it) cannot be ruled out. A failure, or an unknown,
    stands; the evidence always says how many were left out."""
    left_out = unattributed_accepted(obs)
    if not left_out:
        return result
    evidence = {**result.evidence, "unattributed": unattributed_evidence(left_out)}
    if result.status is not Status.PASS:
        return CheckResult(result.status, result.summary, evidence)
    return CheckResult(
        Status.UNKNOWN,
        f"{len(left_out)} accepted effect(s) could not be attributed to a run, so {what} cannot"
        f" be ruled out (the rest: {result.summary}); {IDENTIFY_FIX}",
        evidence,
    )
