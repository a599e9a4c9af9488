"""Provider faults: the usual ways a provider fails, set on the fake before workers start.

``:N`` picks the N-th send of the case (default 1). With several providers
(``[provider.NAME]``), ``@NAME`` says which one fails (``provider_5xx@mail:2``: the 2nd send
to ``mail``); without it, the first provider the scenario names.
``provider_accept_then_drop`` records the effect and cuts the connection before any reply:
the hard case seen from the provider side.
``provider_slow:DURATION`` handles the case's first send at once (the effect is in the log)
and holds its reply that long, whatever other fault that send was due: below the worker's
request timeout (1 s) a slow success, above it a reply that comes after the worker gave up
(a ``provider_timeout`` of a chosen length).
The reply is held, not the request. ``provider_hold:DURATION`` holds the request itself before
the provider processes it: its effect lands when the hold ends (wall time, or once the case
clock has moved that far), and the case drains the provider's epoch before it is judged, so the
effect counts in its own case and never in the next.

In a case where workers race (``concurrent_claim``), "the N-th send" would be whichever send
the race put N-th: a replay could fault another recipient. There the rule is pinned to one
delivery, a (run, destination) pair drawn from the seed and the case id (``pinned_delivery``),
and ``:N`` counts that delivery's sends: the same recipient every time the case runs.
The workload's own rules (a scenario's ``[[provider.faults]]``: "the 1st send is dropped, the
2nd gets a 503") are pinned the same way in a racing case (``pin_workload_rules``); a case
without a race keeps every rule as written.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from fake_providers import FaultRule
from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.errors import BadInputError
from harness.faults._args import DURATION_HELP, ArgError, count, duration_s
from harness.faults._spec import FaultSpec
from harness.invariants._model import EffectRow

#: the highest send number a case may name
MAX_SEND = 1000
#: the longest a slow reply may be held: past the request timeout, short of the worker deadline
MAX_SLOW_S = 30.0
#: a slow reply with no ``:DURATION``: past the worker's 1 s request timeout
DEFAULT_SLOW_S = 1.5


def _check_nth(arg: str) -> int:
    return count(arg, minimum=1, maximum=MAX_SEND, what="a send number")


def _nth(step: Step) -> int:
    try:
        return _check_nth(step.arg) if step.arg else 1
    except ArgError as exc:  # validate_cases refuses these before any case runs
        raise BadInputError(f"{step}: {exc}") from None


def pinned_delivery(
    seed: int,
    case_id: str,
    index: int,
    intended: Mapping[str, Sequence[str]],
    *,
    roster_may_change: bool,
) -> dict[str, str]:
    """The (run, destination) that step ``index`` of case ``case_id`` faults: a function of
    the seed, the case id and the intended destinations alone (sorted, so the order a dict or
    a query gave them in cannot matter), never of which worker got there first.

    ``roster_may_change``: leave out what a roster change may drop or respell before it is ever
    sent to: each run's first destination (in sorted order: dropped, or respelled) and any
    accented one (``:*_nfd`` accents one and respells it), as far as any is left.
    """

    pairs = _pairs(intended, roster_may_change=roster_may_change)
    if not pairs:
        return {}
    digest = hashlib.sha256(f"{seed}:{case_id}:{index}".encode()).digest()
    run, dest = random.Random(digest).choice(pairs)
    return {"run_id": run, "destination": dest}


def _pairs(
    intended: Mapping[str, Sequence[str]], *, roster_may_change: bool
) -> list[tuple[str, str]]:
    """Every (run, destination) a pin may name, sorted (see ``pinned_delivery``)."""

    def candidates(dests: Sequence[str]) -> list[str]:
        ordered = sorted(dests)
        if not roster_may_change:
            return ordered
        plain = [d for d in ordered if d.isascii()]
        return [d for d in plain if d != ordered[0]] or plain or ordered

    return sorted((run, dest) for run, dests in intended.items() for dest in candidates(dests))


#: match fields that name one delivery on their own: a rule holding one needs no pin
_ONE_DELIVERY = ("delivery_id", "idempotency_key")


def pin_workload_rules(
    rules: Sequence[FaultRule],
    *,
    seed: int,
    case_id: str,
    intended: Mapping[str, Sequence[str]],
    roster_may_change: bool,
    provider: str = "",
) -> list[FaultRule]:
    """A racing case's workload rules, each pinned to the deliveries the seed picks.

    A rule that counts sends ("the 2nd send gets a 503") counts them in the order the race
    put them in, so a rerun could fault another recipient. Here the case's sends are read as
    going round the intended deliveries in one order shuffled from the seed, the case id and
    the provider (``L`` deliveries: send ``s`` is delivery ``(s - 1) % L``'s send number
    ``(s - 1) // L + 1``), and a rule for sends ``nth .. nth + times - 1`` becomes, for each
    delivery it covers, a rule matching that (run, destination) alone and counting its sends:
    the 1st and the 2nd send of the case fault two different recipients, and the same two on
    every run of the seed, whichever worker sends them. A rule with dice gets, per delivery,
    dice seeded from its own seed and that delivery. What needs no pin stays as written: a
    rule that names one delivery already, or one for every request (``nth`` 1, no ``times``,
    no dice). A delivery a worker sends through another provider never meets a rule pinned
    at this one (the harness cannot know its routing before the case runs)."""
    out: list[FaultRule] = []
    for rule in rules:
        out.extend(
            _pin(
                rule,
                seed=seed,
                case_id=case_id,
                pairs=_pairs(intended, roster_may_change=roster_may_change),
                provider=provider,
            )
        )
    return out


def _pin(
    rule: FaultRule, *, seed: int, case_id: str, pairs: list[tuple[str, str]], provider: str
) -> list[FaultRule]:
    match = dict(rule.match)
    named = ("run_id" in match and "destination" in match) or any(k in match for k in _ONE_DELIVERY)
    every = rule.nth == 1 and rule.times is None and rule.probability is None
    fits = [
        (run, dest)
        for run, dest in pairs
        if match.get("run_id", run) == run and match.get("destination", dest) == dest
    ]
    if named or every or not fits:
        return [rule]
    shape = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    digest = hashlib.sha256(f"{seed}:{case_id}:{provider}:{shape}".encode()).digest()
    order = list(fits)
    random.Random(digest).shuffle(order)
    size, first = len(order), rule.nth
    pinned: list[FaultRule] = []
    for i, (run, dest) in enumerate(order):
        # this delivery's k-th send is send number i + 1 + (k - 1) * size of the case
        low = max(1, -(-(first - 1 - i) // size) + 1)
        if rule.times is None:
            times: int | None = None
        else:
            high = (first + rule.times - 2 - i) // size + 1
            if high < low:
                continue
            times = high - low + 1
        dice = rule.seed
        if rule.probability is not None:  # dice of its own per delivery
            digest = hashlib.sha256(f"{rule.seed}:{run}:{dest}".encode()).digest()
            dice = int.from_bytes(digest[:6], "big")
        pinned.append(
            replace(
                rule,
                match={**match, "run_id": run, "destination": dest},
                nth=low,
                times=times,
                seed=dice,
            )
        )
    return pinned


def _add(ctx: CaseContext, step: Step, rule: FaultRule) -> None:
    """Arm a step's rule; in a racing case, pinned to the delivery the seed picks."""
    if ctx.case is not None and ctx.case.races:
        match = pinned_delivery(
            ctx.workload.seed,
            ctx.case.id,
            ctx.step_index,
            ctx.intended,
            roster_may_change=any(s.fault == "roster_change" for s in ctx.case.steps),
        )
        rule = replace(rule, match={**rule.match, **match})
    ctx.add_provider_rule(rule, provider=step.provider)


def _check_slow(arg: str) -> float:
    return duration_s(arg, maximum_s=MAX_SLOW_S)


def _slow_prepare(ctx: CaseContext, step: Step) -> None:
    try:
        delay = _check_slow(step.arg) if step.arg else DEFAULT_SLOW_S
    except ArgError as exc:
        raise BadInputError(f"{step}: {exc}") from None
    # A step's rule is armed ahead of the workload's own faults (``add_provider_rule``): in a
    # race the first send may be one of theirs, and the reply must be held whichever send
    # comes first, or a replay could differ.
    _add(ctx, step, FaultRule(fault="timeout", hold_s=delay, then="reply", nth=1))


def _hold_prepare(ctx: CaseContext, step: Step) -> None:
    try:
        delay = _check_slow(step.arg) if step.arg else DEFAULT_SLOW_S
    except ArgError as exc:
        raise BadInputError(f"{step}: {exc}") from None
    # held *before* it is processed: the effect lands when the hold ends (on the case clock
    # too), so the case drains its epoch before it is judged (``campaign._drain``)
    _add(ctx, step, FaultRule(fault="slow", delay_s=delay, nth=1))


def _rule(make: Callable[[int], FaultRule]) -> Callable[[CaseContext, Step], None]:
    def prepare(ctx: CaseContext, step: Step) -> None:
        _add(ctx, step, make(_nth(step)))

    return prepare


def _nothing(ctx: CaseContext, step: Step) -> None:
    """Provider faults act through the provider; the workers run as usual."""


def confirm(
    ctx: CaseContext, step: Step, index: int, effects: Sequence[EffectRow]
) -> tuple[bool, str]:
    """Landed only if the provider says it applied this step's own rule to a request.

    The provider counts, per armed rule, the requests it applied the rule to; the workload's
    own fault rules (a default 503, say) are other rules and cannot stand in for this one.
    """
    rule = ctx.step_rules.get(index)
    position = None if rule is None else ctx.rule_position(rule, provider=step.provider)
    if rule is None or position is None:
        return False, "no provider rule was set for this step"
    name = ctx.provider_name(step.provider)
    effects = [e for e in effects if not e.provider or e.provider == name]
    try:
        stats = ctx.provider_named(step.provider).admin.fault_stats()
    except Exception as exc:  # the provider is the only witness: without it, unconfirmed
        return False, f"the provider could not say whether it applied the fault: {exc}"
    if position >= len(stats):
        return False, "the provider no longer holds this step's rule"
    entry = stats[position]
    if int(entry.get("fired", 0)) >= 1:
        seen = [e for e in effects if e.fault == rule.fault]
        if "destination" in rule.match:  # pinned: a race numbers the records as it went
            pinned = f"{rule.match['destination']} ({rule.match.get('run_id', 'any run')})"
            where = f"; to {pinned}, the delivery the seed picked"
        elif seen:  # numbered within the case: the provider's seq counts earlier cases too
            nth = 1 + sorted(e.seq for e in effects).index(seen[0].seq)
            where = f"; e.g. the case's record {nth}, to {seen[0].destination}"
        else:
            where = ""
        who = f"provider {name}" if len(ctx.providers) > 1 else "the provider"
        return True, f"{who} applied {rule.fault} to {entry['fired']} request(s){where}"
    matched = int(entry.get("matched", 0))
    if matched >= rule.nth:
        return False, (
            f"request {rule.nth} came, but another fault rule (the workload's own?) was applied"
            f" to it first, so {rule.fault} was never applied"
        )
    hint = ""
    if "destination" in rule.match and matched == 0 and len(ctx.providers) > 1:
        # the pick is drawn from every intended delivery: the worker may route this one
        # through another provider (the harness cannot know its routing before it runs)
        hint = (
            f"; the seed pinned {rule.match['destination']} ({rule.match.get('run_id', '')}),"
            f" which the worker may send through another provider than {name}"
        )
    return False, (
        f"the provider saw {matched} matching request(s), never request {rule.nth},"
        f" so {rule.fault} was never applied{hint}"
    )


def _spec(fault_id: str, summary: str, make: Callable[[int], FaultRule]) -> FaultSpec:
    return FaultSpec(
        id=fault_id,
        summary=summary,
        needs_boundary=False,
        run=_nothing,
        prepare=_rule(make),
        arg_help="which send of the case (default 1)",
        confirm=confirm,
        check_arg=_check_nth,
        names_provider=True,
    )


#: longer than the harness's request timeout (1 s), so the worker gives up waiting
TIMEOUT_HOLD_S = 1.5
FAULTS = (
    _spec(
        "provider_accept_then_drop",
        "the provider records the effect but the response never arrives",
        lambda n: FaultRule(fault="accept_then_drop", nth=n),
    ),
    _spec(
        "provider_timeout",
        "the provider accepts, then holds the reply past the worker's timeout",
        lambda n: FaultRule(fault="timeout", hold_s=TIMEOUT_HOLD_S, nth=n),
    ),
    _spec(
        "provider_5xx",
        "the provider answers 503",
        lambda n: FaultRule(fault="status", status=503, nth=n),
    ),
    _spec(
        "provider_429",
        "the provider throttles with 429 and Retry-After",
        lambda n: FaultRule(fault="status", status=429, retry_after=1, nth=n),
    ),
    FaultSpec(
        id="provider_slow",
        summary="the provider handles the case's first send, then holds its reply that long",
        needs_boundary=False,
        run=_nothing,
        prepare=_slow_prepare,
        arg_help=f"how long: {DURATION_HELP}, at most {MAX_SLOW_S:g}s (default {DEFAULT_SLOW_S}s)",
        check_arg=_check_slow,
        confirm=confirm,
        names_provider=True,
    ),
    FaultSpec(
        id="provider_hold",
        summary="the provider holds the case's first send that long before processing it",
        needs_boundary=False,
        run=_nothing,
        prepare=_hold_prepare,
        arg_help=f"how long: {DURATION_HELP}, at most {MAX_SLOW_S:g}s (default {DEFAULT_SLOW_S}s)",
        check_arg=_check_slow,
        confirm=confirm,
        names_provider=True,
    ),
)
