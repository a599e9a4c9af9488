"""Crash during recovery: the second crashes a depth-2 sweep plans, and the seeded sample of
them every default certify runs.

A worker can survive one crash and still be stuck for good after a crash *during* its
recovery (a Redis-streams consumer whose pending entries are claimed by nobody once the
claimer dies mid-claim). A depth-1 certify never sees that, and a full depth-2 sweep costs a
case per (first crash, recovery hit). So certify adds a few: ``RECOVERY_SAMPLE`` second
crashes, chosen with the campaign's seed among those its own first crashes made possible
(each at a hit the recovering worker really made), and says so in its summary. A planned
second crash that does not land is a gap like any other, never a pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from harness.engine.case.campaign import Campaign, CaseResult
from harness.engine.plan.schedule import CaseSpec, Step

#: second crashes a default certify adds (a few cases; `sweep --depth 2` runs them all)
RECOVERY_SAMPLE = 3


def second_crashes(firsts: Iterable[CaseResult], boundaries: Sequence[str]) -> list[CaseSpec]:
    """Every second crash the landed first crashes make possible: the recovering incarnation
    (w2) crashed again at each hit of each boundary it reached, in plan order."""
    seconds: list[CaseSpec] = []
    for first in firsts:
        if not first.spec.steps or not first.all_landed:
            continue
        if any(step.fault != "crash" for step in first.spec.steps):
            continue
        recovery = first.hits_by_worker.get("w2", {})
        for b2 in boundaries:
            for h2 in range(1, recovery.get(b2, 0) + 1):
                seconds.append(CaseSpec(steps=(*first.spec.steps, Step("crash", b2, h2))))
    return seconds


def sample(
    firsts: Iterable[CaseResult], boundaries: Sequence[str], *, seed: int, size: int
) -> tuple[list[CaseSpec], int]:
    """Up to ``size`` second crashes chosen with ``seed`` (in plan order), and how many there
    were to choose from. Single first crashes only: a depth-2 case is no first crash.

    The same seed must choose the same cases on a rerun, though how often a recovering
    worker reaches a boundary can vary with timing (373 possible schedules in one run, 367
    in the next). So only a recovery's *first* hit of each boundary is drawn (that it reached
    a boundary at all is stable where its count is not), and each candidate is ranked by a
    seeded hash of its own id, never by its position in a list whose length may differ: a
    candidate that comes or goes moves no other candidate's rank."""
    singles = [f for f in firsts if len(f.spec.steps) == 1]
    every = second_crashes(singles, boundaries)
    firsts_hits = [c for c in every if c.steps[-1].hit == 1]
    ranked = sorted(firsts_hits, key=lambda c: _rank(seed, c.id))[:size]
    order = {c.id: i for i, c in enumerate(every)}
    return sorted(ranked, key=lambda c: order[c.id]), len(every)


def _rank(seed: int, case_id: str) -> bytes:
    return hashlib.sha256(f"{seed}:{case_id}".encode()).digest()


def run_sample(
    campaign: Campaign,
    firsts: Sequence[CaseResult],
    *,
    size: int = RECOVERY_SAMPLE,
    on_plan: Callable[[list[str]], None] | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
) -> tuple[list[CaseResult], dict[str, Any]]:
    """Run the seeded sample after a certify's first crashes: its results, and the record the
    report keeps (``recovery_sample``) and the summary states."""
    from harness.engine.case.parallel import run_cases

    settings = campaign.settings
    chosen, possible = sample(firsts, settings.system.boundaries, seed=settings.seed, size=size)
    if on_plan is not None and chosen:
        on_plan([c.id for c in chosen])
    results = run_cases(campaign, chosen, jobs=settings.jobs, on_case=on_case)
    record: dict[str, Any] = {
        "planned": len(chosen),
        "possible": possible,
        "landed": sum(1 for r in results if r.all_landed),
        "seed": settings.seed,
        "cases": [c.id for c in chosen],
    }
    return results, record
