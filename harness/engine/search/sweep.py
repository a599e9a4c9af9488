"""Choose injections by enumeration: a dry run records every boundary hit, then one case per
(boundary, hit), and with depth 2 a second crash at every hit of each recovery.

A system that discovers its points (``System.discover``: a program that declares none) is
swept at every near-side point its dry run reached (``before_send.WHERE``, ...): at the
first hit of each class of hit, and a seeded sample of the others (``_classes``; all of them
with ``all_hits``).

Far-side points are planned from the same dry run: each request provider NAME accepted in
it is one case, ``crash@accepted.NAME#k`` for k = 1..count (``harness.engine.process._far_side``).
A provider that accepted nothing in the dry run has no far-side point to cover (no gap).
Depth 2 adds second crashes at the recovery's boundaries only.

The dry run's counts are the denominator of the coverage figure the report gives: a sweep
that did not crash at some (boundary, hit) it saw in the dry run says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.engine.case.campaign import Campaign, CaseResult, refuse_own_work
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process import _far_side
from harness.engine.search import _classes
from harness.engine.search.recovery import second_crashes

#: hits of a discovered point crashed beyond the first of each class (``--sample``)
DEFAULT_SAMPLE = _classes.DEFAULT_SAMPLE
#: the console's sentence for a report's ``sweep`` counts of hits
describe_hits = _classes.describe


@dataclass
class SweepCoverage:
    #: (boundary, hit) pairs the dry run reached
    expected: set[tuple[str, int]] = field(default_factory=set)
    #: pairs a first crash actually landed on
    covered: set[tuple[str, int]] = field(default_factory=set)
    #: depth-2 cases planned and those whose second crash fired
    second_planned: int = 0
    second_fired: int = 0
    #: the depth-1 plan in order (dry run, then one crash per pair), whatever the shard
    plan: list[str] = field(default_factory=list)
    #: documented boundaries the dry run never reached (no pair can be planned there)
    unreached: list[str] = field(default_factory=list)
    #: sends and commits the dry run saw and could not name (``CaseResult.unnamed``): no
    #: pair can be planned there, so they are never crashed, and the coverage says so
    unnamed: dict[str, int] = field(default_factory=dict)
    #: which hits of the dry run were crashed: one per class and a sample
    hits: _classes.HitChoice | None = None

    def to_json(self) -> dict[str, object]:
        missing = sorted(self.expected - self.covered)
        return {
            **(self.hits.to_json() if self.hits is not None else {}),
            "pairs_expected": len(self.expected),
            "pairs_covered": len(self.covered & self.expected),
            "pairs_missing": [f"{b}#{h}" for b, h in missing],
            "boundaries_unreached": list(self.unreached),
            "depth2_planned": self.second_planned,
            "depth2_fired": self.second_fired,
            **({"unnamed_seen": dict(self.unnamed)} if self.unnamed else {}),
        }


def sweep(
    campaign: Campaign,
    *,
    depth: int = 1,
    on_case: Callable[[CaseResult], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    limit: int | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    on_dry_run: Callable[[CaseResult], None] | None = None,
    sample: int = _classes.DEFAULT_SAMPLE,
    all_hits: bool = False,
) -> tuple[list[CaseResult], SweepCoverage]:
    """Run the dry run, then every first crash it makes possible (and second ones at depth 2).

    With ``shard=(i, n)`` every shard runs the dry run to plan, then keeps the i-th of every n
    cases of the plan (the dry run first, then one crash per (boundary, hit)); at depth 2 it
    plans its second crashes from its own first ones, which no other shard runs. The shards'
    reports merge into the unsharded one (``crash-harness report merge``), and each shard's
    coverage counts the pairs of its own slice.

    ``on_dry_run(dry)`` is told the dry run once the plan is known (what it discovered is in
    ``campaign.settings.system.boundaries`` by then).

    Of a discovered point's hits, the first of each class and ``sample`` more drawn from the
    seed are crashed (``harness.engine.search._classes``); ``all_hits`` crashes every one.

    ``on_plan(n)`` is told each time ``n`` more cases are planned (the dry run and the first
    crashes once the dry run is done, the second crashes once the first ones are), so a
    progress counter can say ``N/M`` before the cases it counts have run.
    """
    from harness.engine.case.parallel import run_cases

    coverage = SweepCoverage()
    dry = campaign.run(CaseSpec())
    refuse_own_work(campaign.settings.system, dry)
    # what the dry run found (a program's boundaries, every near-side point) is what the sweep
    # crashes, and what its coverage and the report count, like a named boundary; far-side
    # points are planned below, one per accepted request of the dry run
    found = campaign.adopt_discovered(dry).boundaries
    boundaries = tuple(b for b in found if not _far_side.is_far_side(b))
    if on_dry_run is not None:
        on_dry_run(dry)
    first_hits = dry.hits_by_worker.get("w1", {})
    pairs = [(b, h) for b in boundaries for h in range(1, first_hits.get(b, 0) + 1)]
    coverage.unreached = [b for b in boundaries if not first_hits.get(b)]
    coverage.unnamed = dict(dry.unnamed)
    # one crash per class of hit, and a seeded sample of the rest (``_classes``)
    choice = _classes.choose(
        pairs, dry.classes, seed=campaign.settings.seed, sample=sample, all_hits=all_hits
    )
    coverage.hits = choice
    pairs = list(choice.planned)
    # every request each provider accepted in the dry run is a far-side point
    for name in campaign.providers:
        point = _far_side.point(name)
        pairs += [(point, k) for k in range(1, dry.reached.get(point, 0) + 1)]
    coverage.plan = [dry.spec.id, *(CaseSpec("crash", b, h).id for b, h in pairs)]
    keep_dry = True
    if shard is not None:
        index, count = shard
        keep_dry = index == 1  # the dry run is the plan's first case
        pairs = [p for k, p in enumerate(pairs, start=1) if k % count == index - 1]
    results: list[CaseResult] = []
    coverage.expected.update(pairs)
    planned = pairs if limit is None else pairs[:limit]
    if on_plan is not None:
        on_plan(len(planned) + (1 if keep_dry else 0))
    if keep_dry:
        if on_case is not None:
            on_case(dry)
        results.append(dry)
    firsts = run_cases(
        campaign, [CaseSpec("crash", b, h) for b, h in planned], jobs=jobs, on_case=on_case
    )
    results.extend(firsts)
    for first in firsts:
        # covered only if the very crash planned there landed (its own evidence, not merely
        # "some crash fired", nor "the dry run reached it")
        if first.all_landed and first.spec.boundary is not None and first.spec.hit is not None:
            coverage.covered.add((first.spec.boundary, first.spec.hit))
    # the recovering incarnation (w2) crashed again at every hit it makes
    seconds = second_crashes(firsts, boundaries) if depth >= 2 else []
    coverage.second_planned = len(seconds)
    if on_plan is not None and seconds:
        on_plan(len(seconds))
    for second in run_cases(campaign, seconds, jobs=jobs, on_case=on_case):
        results.append(second)
        if second.all_landed:
            coverage.second_fired += 1
    return results, coverage
