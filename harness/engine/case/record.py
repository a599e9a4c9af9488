"""The last stage of a case: its ``CaseResult``, the one thing the campaign, the reports and
the command line read of it; and the result of a case that could not be run.

Everything a report shows of a case is decided here from the earlier stages' values, sorted
so two runs of one seed record the same content (``harness.engine.search.determinism``).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import make_url

from harness.engine.case.judge import Judgement
from harness.engine.case.prepare import Prepared
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process import _far_side, _leftovers
from harness.engine.process.supervisor import OutcomeKind
from harness.engine.results import CampaignSettings, CaseResult, Landing, StepRecord
from harness.engine.store import _db, _secrets
from harness.engine.store import trace as trace_store
from harness.engine.store.timeline import build_timeline
from harness.engine.store.trace import TraceEvent
from harness.invariants import EffectRow, Observation, Status
from harness.invariants.no_unintended_effect import tally


def record_case(
    settings: CampaignSettings,
    case: CaseSpec,
    prepared: Prepared,
    observation: Observation,
    events: list[TraceEvent],
    judgement: Judgement,
    leftovers: list[_leftovers.Leftover],
) -> CaseResult:
    """The case as its readers get it: verdict and checks, counts, coverage, notes, the
    command that replays it, and a timeline for every case a person must look at."""
    ctx, named = prepared.ctx, prepared.named
    verdict = judgement.verdict
    timeline: list[dict[str, Any]] = []
    if verdict is not Status.PASS:  # a picture for every case a person must look at
        timeline = build_timeline(
            events,
            observation.effects,
            ledger_events=observation.ledger.audit if observation.ledger else None,
            provider_advances=list(ctx.provider_advances),
        )
    placement = _placement(observation)
    return CaseResult(
        spec=case,
        verdict=verdict,
        invariants=judgement.checks,
        workers=ctx.outcomes,
        intended=sum(len(d) for d in ctx.intended.values()),
        accepted=sum(1 for e in observation.effects or () if e.accepted),
        on_intended=placement[0],
        unintended=placement[1],
        reached=_with_far_side(trace_store.boundaries_reached(events), observation.effects),
        targets=trace_store.point_targets(events),
        callers=trace_store.point_callers(events),
        classes=trace_store.hit_classes(events, "w1"),
        unnamed=trace_store.unnamed_points(events),
        foreign_runs=_foreign_runs(observation),
        hits_by_worker=_hits_by_worker(events),
        # a crash scoped to one process (a work-horse) leaves its worker running
        # a planned SIGKILL happened (a crash scoped to one process, a work-horse, leaves its
        # worker running), and no planned step failed to land
        crash_fired=bool(ctx.steps)
        and all(r.landed for r in ctx.steps)
        and (
            any(o.kind is OutcomeKind.CRASHED_AS_PLANNED for o in ctx.outcomes)
            or any(ev.event == "crash" and ev.worker != "harness" for ev in events)
        ),
        notes=ctx.notes,
        duration_s=time.time() - ctx.started_at,
        replay=replay_command(settings, case),
        timeline=timeline,
        step_records=list(ctx.steps),
        ledger=_given_ledger(settings, ctx.target),
        undecided_because="; ".join(judgement.because) or None,
        by_provider=_by_provider(list(named), observation) if len(named) > 1 else {},
        fault_targets=fault_targets(observation.effects, several=len(named) > 1),
        seq_base=_seq_base(observation.effects, list(named) if len(named) > 1 else [""]),
        trace=str(ctx.trace_path),
        leftovers=leftovers,
    )


def not_run(
    settings: CampaignSettings, case: CaseSpec, why: str, *, ran: bool = False
) -> CaseResult:
    """A case the campaign could not run (its provider is gone), or gave up (``ran``: the
    harness could not write): unknown, never a pass."""
    said = f"{'given up' if ran else 'not run'}: {why}"
    return CaseResult(
        spec=case,
        verdict=Status.UNKNOWN,
        invariants={},
        workers=[],
        intended=0,
        accepted=0,
        reached={},
        crash_fired=False,
        notes=[said],
        duration_s=0.0,
        replay=replay_command(settings, case),
        step_records=[StepRecord(str(s), Landing.NOT_RUN, said) for s in case.steps],
        # a case given up names the harness's own failure as it is; one never run says so
        undecided_because=why if ran else said,
    )


def replay_command(settings: CampaignSettings, case: CaseSpec) -> str:
    from harness.engine.plan import _overrides
    from harness.systems import importable_name

    parts = settings.replay_prefix or [
        "crash-harness",
        "certify",
        "--system",
        importable_name(settings.system),
    ]
    parts = [*parts, *_overrides.as_args(settings.replay_overrides)]
    parts = [*parts, "--seed", str(settings.seed), "--case", case.id]
    if settings.db_url is not None and settings.db_server is None:
        url = make_url(settings.db_url).render_as_string(hide_password=True)
        parts += ["--db", _secrets.scrub(url)]  # a ?password= too
    return shlex.join(parts)


def _given_ledger(settings: CampaignSettings, target: _db.DatabaseTarget) -> str | None:
    """The case's ledger file, when it is one the user named with ``--db`` (not a work dir's)."""
    if settings.db_url is None or target.kind != "sqlite":
        return None
    return make_url(target.url).database


def fault_targets(effects: Iterable[EffectRow] | None, *, several: bool) -> list[dict[str, Any]]:
    """Each request a provider fault met: the fault, its (run, destination) and what became
    of it (and which provider, with several), sorted: the same list on every run of one
    seed, whatever order a race sent the requests in."""
    found = [
        {
            **({"provider": e.provider} if several else {}),
            "fault": e.fault,
            "run_id": e.run_id,
            "destination": e.destination,
            "outcome": e.outcome,
        }
        for e in effects or ()
        if e.fault
    ]
    return sorted(found, key=lambda t: tuple(str(v) for v in t.values()))


def _seq_base(effects: Iterable[EffectRow] | None, names: list[str]) -> dict[str, int]:
    """Each provider's number before the case's first record (``CaseResult.seq_base``)."""
    rows = list(effects or ())
    bases = {}
    for name in names:
        own = [e.seq for e in rows if not name or e.provider == name]
        if own:
            bases[name] = min(own) - 1
    return bases


def _placement(observation: Observation) -> tuple[int | None, int | None]:
    """How many accepted effects lie on an intended delivery, and how many went to an
    intended recipient under a run or delivery nobody intended (None: the logs were not
    read, nothing was counted)."""
    if observation.effects is None:
        return None, None
    counts = tally(observation).values()
    return sum(c["on_intended"] for c in counts), sum(c["unintended"] for c in counts)


def _by_provider(names: list[str], observation: Observation) -> dict[str, dict[str, int]]:
    """Each provider's share of the case's effects: accepted, every request it logged, and of
    the accepted those on an intended delivery and those nobody intended."""
    zero = {"accepted": 0, "requests": 0, "on_intended": 0, "unintended": 0}
    out = {name: dict(zero) for name in names}
    for eff in observation.effects or ():
        counts = out.setdefault(eff.provider, dict(zero))
        counts["requests"] += 1
        counts["accepted"] += int(eff.accepted)
    for name, placed in tally(observation).items():
        out.setdefault(name, dict(zero)).update(placed)
    return out


def _with_far_side(
    reached: dict[str, int], effects: tuple[EffectRow, ...] | None
) -> dict[str, int]:
    """``reached`` plus every provider's far-side point: each accepted effect of provider
    NAME in the case's epoch is a hit of ``accepted.NAME`` (a held one included, so the
    crash line the harness wrote there is not counted twice)."""
    out = {b: n for b, n in reached.items() if not _far_side.is_far_side(b)}
    for eff in effects or ():
        if eff.accepted:
            point = _far_side.point(eff.provider)
            out[point] = out.get(point, 0) + 1
    return out


def _hits_by_worker(events: list[TraceEvent]) -> dict[str, dict[str, int]]:
    hits: dict[str, dict[str, int]] = {}
    for ev in events:
        if ev.boundary is not None and ev.hit is not None:
            counts = hits.setdefault(ev.worker, {})
            counts[ev.boundary] = max(counts.get(ev.boundary, 0), ev.hit)
    return hits


def _foreign_runs(observation: Observation) -> list[str]:
    """The first few run ids of accepted effects nobody intended (a worker that keeps its own
    orders sends under those, never under the harness's runs)."""
    found = {
        e.run_id
        for e in observation.effects or ()
        if e.accepted and e.run_id and e.run_id not in observation.intended
    }
    return sorted(found)[:5]
