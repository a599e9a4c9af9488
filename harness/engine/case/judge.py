"""The fourth stage of a case: its planned steps confirmed, every invariant checked, and one
rule from them to the case's verdict.

What the harness cannot stand behind is never a pass and never the worker's failure: a
worker that died on its own, work pending at a deadline, a lost provider, an epoch someone
else moved, the harness's own full disk each make what they touch unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.engine.case._context import ANOMALIES, CaseContext
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process.supervisor import OutcomeKind, WorkerOutcome
from harness.engine.results import Landing, StepRecord
from harness.engine.store import _room
from harness.engine.store.trace import TraceEvent
from harness.faults import FAULTS
from harness.invariants import CheckResult, EffectRow, Observation, Status, looks, run_all


@dataclass
class Judgement:
    """A case's verdict and each invariant's, with why the case was left undecided."""

    checks: dict[str, CheckResult]
    verdict: Status
    #: the harness's own reasons nothing in the case is decided (a lost provider, a full disk)
    because: list[str]


def judge_case(
    ctx: CaseContext,
    case: CaseSpec,
    observation: Observation,
    events: list[TraceEvent],
    *,
    epoch: int,
    lost: str | None,
    left_behind: bool,
) -> Judgement:
    """Steps confirmed from the provider's log, every invariant checked, and each failure
    or pass the harness cannot stand behind (an anomaly, a deadline, a lost provider, a
    doubted epoch, its own full disk) made unknown, before the one verdict rule."""
    _confirm_steps(ctx, case, observation.effects)
    _explain_raises(ctx, observation.effects)
    checks = _after_deadline(_after_anomaly(run_all(observation), ctx.outcomes), events)
    if lost is not None:
        checks = _undecided(checks, lost, f"{lost} during the case", names=checks)
    checks = _after_doubt(checks, epoch, ctx.provider_doubts)
    # the harness's own disk full at the end: whatever failed may be its doing, not the
    # worker's (a ledger write refused for want of room): nothing in the case is decided
    because = [] if lost is None else [f"{lost} during the case"]
    full = _room.full(ctx.case_dir)
    if full is not None:
        because.append(full)
        checks = _undecided(checks, full, full, names=checks)
        ctx.notes.append(full)
    verdict = _verdict(
        checks,
        ctx.outcomes,
        ctx.steps,
        planned=len(case.steps),
        lost=lost or full,
        evidence_doubted=bool(ctx.provider_doubts),
        left_behind=left_behind,
    )
    return Judgement(checks=checks, verdict=verdict, because=because)


def _confirm_steps(ctx: CaseContext, case: CaseSpec, effects: tuple[EffectRow, ...] | None) -> None:
    """Steps whose evidence is the provider's log (provider faults) are judged now."""
    for index, step in enumerate(case.steps):
        confirm = FAULTS[step.fault].confirm
        if confirm is None or index >= len(ctx.steps):
            continue
        if ctx.steps[index].landing is Landing.NOT_RUN:
            continue
        if effects is None:
            ctx.steps[index] = StepRecord(
                str(step), Landing.UNCONFIRMED, "the provider's effect log could not be read"
            )
            continue
        landed, detail = confirm(ctx, step, index, effects)
        ctx.steps[index] = StepRecord(
            str(step), Landing.LANDED if landed else Landing.UNCONFIRMED, detail
        )
        if not landed:
            ctx.notes.append(f"{step}: not landed: {detail}")


def _explain_raises(ctx: CaseContext, effects: tuple[EffectRow, ...] | None) -> None:
    """A worker that died by raising gets one line (exception, its own frame, the provider
    fault it did not survive) in place of "died with exit code 70"."""
    from harness.engine.case import _raised

    for o in ctx.outcomes:
        if o.kind is not OutcomeKind.DIED:
            continue
        line = _raised.explain(o.worker, o.stderr_tail, effects)
        if line is None:
            continue
        prefix = f"worker {o.worker} (pid {o.pid}) {o.kind}"
        ctx.notes[:] = [line if n.startswith(prefix) else n for n in ctx.notes]


#: invariants that only mean something if the workers ran to the end; when a worker died on
#: its own or hung, their failure is a consequence of that, and the case is inconclusive
_NEEDS_COMPLETION = frozenset({"no_silent_loss"})


def _after_anomaly(
    checks: dict[str, CheckResult], outcomes: list[WorkerOutcome]
) -> dict[str, CheckResult]:
    """A worker that died or hung on its own leaves work undone: an invariant that needs the
    work finished cannot be judged then, so its failure becomes *unknown*, never a fail."""
    dead = [o for o in outcomes if o.kind in ANOMALIES]
    if not dead:
        return checks
    why = ", ".join(f"{o.worker} {o.kind.value}" for o in dead)
    names = set(_NEEDS_COMPLETION)
    if _only_unfinished(checks.get("accepted_reconciled_or_unknown")):
        names.add("accepted_reconciled_or_unknown")
    return _undecided(checks, why, f"the work was never finished ({why})", names=names)


#: ledger states that say "not finished yet", not "given up": what a dead worker leaves
_UNFINISHED = frozenset({"pending", "claimed", "missing"})


def _only_unfinished(check: CheckResult | None) -> bool:
    """Whether every accepted effect ``accepted_reconciled_or_unknown`` failed on ends in a
    row its dead worker left unfinished (pending, claimed, no row yet): a consequence of the
    death, like a loss. A row the worker wrote ``failed`` is its own word and stands."""
    if check is None or check.status is not Status.FAIL:
        return False
    problems = check.evidence.get("unreconciled") or []
    return bool(problems) and all(p.get("ledger_status") in _UNFINISHED for p in problems)


def _after_deadline(
    checks: dict[str, CheckResult], events: list[TraceEvent]
) -> dict[str, CheckResult]:
    """Work the system still holds as pending at the settle deadline is late, not lost: by
    its own account it is still there (a message stranded until a visibility timeout).
    ``liveness`` fails for it; an invariant that needs the work finished is *unknown*."""
    deadline = next((ev for ev in events if ev.event == "settle_deadline"), None)
    if deadline is None:
        return checks
    probe = str((deadline.detail or {}).get("probe") or "").strip()
    why = "still pending at the settle deadline" + (f" ({probe})" if probe else "")
    return _undecided(checks, why, f"the work was {why}, not given up by the system")


def _after_doubt(
    checks: dict[str, CheckResult], epoch: int, doubts: list[str]
) -> dict[str, CheckResult]:
    """Someone other than the harness reset the provider or edited its log during the case
    (``_check_epoch``): a process of the case reached what the verdict rests on, so no
    invariant passes. Each pass becomes *unknown*, its own judgement (on the case's epoch,
    by number) kept in the summary; a failure stands."""
    if not doubts:
        return checks
    why = "; ".join(doubts) + ", not by the harness"
    out = dict(checks)
    for name, check in checks.items():
        if check.status is Status.PASS:
            out[name] = CheckResult(
                Status.UNKNOWN,
                f"{name} could not decide: {why}; as judged on epoch {epoch}: {check.summary}",
                {**check.evidence, "undecided_because": why},
            )
    return out


def _undecided(
    checks: dict[str, CheckResult],
    why: str,
    said: str,
    *,
    names: Iterable[str] = _NEEDS_COMPLETION,
) -> dict[str, CheckResult]:
    """Every failed invariant of ``names`` (by default those that need the work finished),
    turned *unknown* because of ``why`` (kept in its evidence), its own judgement kept in
    the summary."""
    out = dict(checks)
    for name in list(names):
        check = out.get(name)
        if check is not None and check.status is Status.FAIL:
            out[name] = CheckResult(
                Status.UNKNOWN,
                f"{name} could not decide: {said}; as judged: {check.summary}",
                {**check.evidence, "undecided_because": why},
            )
    return out


def _verdict(
    checks: dict[str, CheckResult],
    outcomes: list[WorkerOutcome],
    steps: list[StepRecord] | None = None,
    *,
    planned: int = 0,
    lost: str | None = None,
    evidence_doubted: bool = False,
    left_behind: bool = False,
) -> Status:
    """The case's verdict: a broken invariant first, then a case whose provider was lost
    (undecided, whatever its steps did), then a planned step that did not land (a gap: never
    a pass), then anything undecided, then pass. ``evidence_doubted`` (the provider's epoch or
    log was changed by someone other than the harness) makes a would-be pass undecided: a
    failure judged on the case's epoch still stands. ``left_behind`` (a process of the case
    outlived its worker or the case, ``_leftovers``) makes a would-be pass undecided too:
    what it did after is not known; it is never a failure on that ground alone."""
    if any(c.status is Status.FAIL for c in checks.values()):
        return Status.FAIL
    if lost is not None:
        return Status.UNKNOWN
    records = steps or []
    missed = [r for r in records if r.landing in (Landing.NOT_REACHED, Landing.UNCONFIRMED)]
    if missed or (len(records) < planned and not any(o.kind in ANOMALIES for o in outcomes)):
        return Status.GAP
    undecided = [c for c in checks.values() if looks.look(c) == "undecided"]
    if any(o.kind in ANOMALIES for o in outcomes) or undecided or evidence_doubted:
        return Status.UNKNOWN
    if left_behind:
        return Status.UNKNOWN
    return Status.PASS
