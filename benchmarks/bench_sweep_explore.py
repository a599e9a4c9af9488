"""Sweep wall time and explore throughput on real processes (issue goals: a full sweep of
the built-in reference scenario in <= 60 s on 2 cores; explore >= 30 schedules per second).

Prints medians over rounds, measured in this one run:
- the full sweep of ``reference-sweep`` (dry run + one case per (boundary, hit)), SQLite;
- explore on ``reference-explore`` with a fixed budget: schedules per second, each schedule
  a real case (fork, SIGKILL/pause/clock moves, restart, checkers).
"""

from __future__ import annotations

import statistics
import sys
import time

from harness import scenario as scenario_mod
from harness.campaign import Campaign, CampaignSettings
from harness.explore import explore
from harness.invariants import Status
from harness.sweep import sweep
from harness.systems import resolve

ROUNDS = 3
EXPLORE_BUDGET = 60


def _settings(name: str, seed: int) -> CampaignSettings:
    sc = scenario_mod.load(scenario_mod.resolve_path(name))
    return CampaignSettings(
        system=resolve(sc.system),
        seed=seed,
        runs=sc.runs,
        destinations_per_topic=sc.destinations_per_topic,
    )


def main() -> int:
    sweep_times: list[float] = []
    pairs = 0
    for r in range(ROUNDS):
        with Campaign(_settings("reference-sweep", 1)) as campaign:
            start = time.perf_counter()
            results, coverage = sweep(campaign)
            sweep_times.append(time.perf_counter() - start)
        pairs = len(coverage.expected)
        assert all(x.verdict is Status.PASS for x in results), f"round {r}: a case failed"
    rates: list[float] = []
    for r in range(ROUNDS):
        with Campaign(_settings("reference-explore", 100 + r)) as campaign:
            start = time.perf_counter()
            found = explore(campaign, budget=EXPLORE_BUDGET, seed=100 + r, database_dir=None)
            rates.append(len(found.tried) / (time.perf_counter() - start))
    print(f"sweep reference-sweep: {pairs} (boundary, hit) cases + dry run")
    print(f"  wall time median {statistics.median(sweep_times):6.2f} s  (goal <= 60 s)")
    print(f"explore reference-explore: budget {EXPLORE_BUDGET}")
    print(f"  schedules/s median {statistics.median(rates):6.2f}  (goal >= 30)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
