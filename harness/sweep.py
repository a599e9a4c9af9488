"""Choose injections by enumeration: a dry run records every boundary hit, then one case per
(boundary, hit), and with depth 2 a second crash at every hit of each recovery.

The dry run's counts are the denominator of the coverage figure the report gives: a sweep
that did not crash at some (boundary, hit) it saw in the dry run says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.campaign import Campaign, CaseResult
from harness.schedule import CaseSpec, Step


@dataclass
class SweepCoverage:
    #: (boundary, hit) pairs the dry run reached
    expected: set[tuple[str, int]] = field(default_factory=set)
    #: pairs a first crash actually landed on
    covered: set[tuple[str, int]] = field(default_factory=set)
    #: depth-2 cases planned and those whose second crash fired
    second_planned: int = 0
    second_fired: int = 0

    def to_json(self) -> dict[str, object]:
        missing = sorted(self.expected - self.covered)
        return {
            "pairs_expected": len(self.expected),
            "pairs_covered": len(self.covered & self.expected),
            "pairs_missing": [f"{b}#{h}" for b, h in missing],
            "depth2_planned": self.second_planned,
            "depth2_fired": self.second_fired,
        }


def sweep(
    campaign: Campaign,
    *,
    depth: int = 1,
    on_case: Callable[[CaseResult], None] | None = None,
    limit: int | None = None,
    jobs: int = 1,
) -> tuple[list[CaseResult], SweepCoverage]:
    """Run the dry run, then every first crash it makes possible (and second ones at depth 2)."""
    from harness.parallel import run_cases

    coverage = SweepCoverage()
    dry = campaign.run(CaseSpec())
    if on_case is not None:
        on_case(dry)
    results: list[CaseResult] = [dry]
    boundaries = campaign.settings.system.boundaries
    first_hits = dry.hits_by_worker.get("w1", {})
    for boundary in boundaries:
        for hit in range(1, first_hits.get(boundary, 0) + 1):
            coverage.expected.add((boundary, hit))
    planned = sorted(coverage.expected, key=lambda p: (boundaries.index(p[0]), p[1]))
    if limit is not None:
        planned = planned[:limit]
    firsts = run_cases(
        campaign, [CaseSpec("crash", b, h) for b, h in planned], jobs=jobs, on_case=on_case
    )
    results.extend(firsts)
    seconds: list[CaseSpec] = []
    for first in firsts:
        if first.crash_fired and first.spec.boundary is not None and first.spec.hit is not None:
            coverage.covered.add((first.spec.boundary, first.spec.hit))
        if depth < 2 or not first.crash_fired:
            continue
        # The recovering incarnation is w2; crash it again at every hit it makes.
        recovery = first.hits_by_worker.get("w2", {})
        for b2 in boundaries:
            for h2 in range(1, recovery.get(b2, 0) + 1):
                seconds.append(CaseSpec(steps=(*first.spec.steps, Step("crash", b2, h2))))
    coverage.second_planned = len(seconds)
    for second in run_cases(campaign, seconds, jobs=jobs, on_case=on_case):
        results.append(second)
        fired = sum(1 for w in second.workers if w.kind == "crashed_as_planned")
        if fired >= 2:
            coverage.second_fired += 1
    return results, coverage
