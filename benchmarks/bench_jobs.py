"""``--jobs 2`` against ``--jobs 1`` on the built-in sweep (issue goal: at least 1.7x faster on
a 2-core machine).

Both are measured in this one run, rounds interleaved (1, 2, 1, 2, ...) so that a machine
that slows down or speeds up mid-run weighs on both alike. Prints the median wall time of
each and the ratio of the medians, plus the part of the sweep that cannot be parallel (the
dry run, which plans the cases) so the ratio can be read against its ceiling.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time

from _goals import record
from _quick import QUICK, pick

from harness.engine.case.campaign import Campaign, CampaignSettings
from harness.engine.plan import scenario as scenario_mod
from harness.engine.search.sweep import sweep
from harness.invariants import Status

ROUNDS = pick(3, 1)
#: the quick form sweeps one boundary's scenario, the full one the reference's whole sweep
SCENARIO = "boundary-after-claim" if QUICK else "reference-sweep"


def _settings(jobs: int) -> CampaignSettings:
    sc = scenario_mod.load(scenario_mod.resolve_path(SCENARIO))
    return CampaignSettings(
        system=sc.build_system(),
        seed=1,
        runs=sc.runs,
        destinations_per_topic=sc.destinations_per_topic,
        jobs=jobs,
    )


def _cpu_s() -> float:
    """CPU of this process and every descendant it has reaped (jobs, workers, providers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _one(jobs: int) -> tuple[float, float, int, float]:
    cpu0 = _cpu_s()
    with Campaign(_settings(jobs)) as campaign:
        start = time.perf_counter()
        results, coverage = sweep(campaign, jobs=jobs)
        wall = time.perf_counter() - start
    cpu = _cpu_s() - cpu0  # the campaign's set-up and tear-down included: they run on a core
    assert all(r.verdict is Status.PASS for r in results), f"jobs={jobs}: a case failed"
    return wall, results[0].duration_s, len(coverage.expected), cpu / wall


def main() -> int:
    walls: dict[int, list[float]] = {1: [], 2: []}
    busy: dict[int, list[float]] = {1: [], 2: []}
    dry: list[float] = []
    cases = 0
    for _ in range(ROUNDS):
        for jobs in (1, 2):
            wall, dry_s, cases, cores_busy = _one(jobs)
            walls[jobs].append(wall)
            busy[jobs].append(cores_busy)
            dry.append(dry_s)
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    serial = statistics.median(dry)
    ceiling = one / (serial + (one - serial) / 2)
    print(f"sweep {SCENARIO}: dry run + {cases} cases, {ROUNDS} rounds each, interleaved")
    print(f"  --jobs 1  median {one:6.2f} s")
    print(f"  --jobs 2  median {two:6.2f} s")
    print(f"  speed-up  {one / two:5.2f}x  (goal >= 1.8x; ceiling with a {serial:.2f} s serial")
    print(f"            dry run: {ceiling:.2f}x)")
    b1, b2 = statistics.median(busy[1]), statistics.median(busy[2])
    print(
        f"  cores kept busy (CPU s / wall s): --jobs 1 {b1:.2f}, --jobs 2 {b2:.2f}"
        f" of {os.cpu_count()}; a CPU-bound ceiling: {min(2.0, (os.cpu_count() or 1) / b1):.2f}x"
    )
    record("sweep --jobs 2 / --jobs 1 speed-up", one / two, goal=1.8, at_most=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
