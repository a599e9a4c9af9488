"""Sweep wall time and explore throughput on real processes (issue goals: a full sweep of
the built-in reference scenario in <= 60 s on 2 cores; explore >= 30 schedules per second).

Prints medians over rounds, measured in this one run:
- the depth-2 sweep of ``reference-sweep`` (dry run, one case per (boundary, hit), then a
  second crash at every hit of each recovery) with one job per core, SQLite;
- explore on ``reference-explore`` with a fixed budget: schedules per second, each schedule
  a real case (fork, SIGKILL/pause/clock moves, restart, checkers), as one search
  (``jobs=1``), split over one search per core (``jobs=2``), and over one more than that;
  and the landed share: drawn schedules whose every step landed (issue #26: >= 90 %).

``python benchmarks/bench_sweep_explore.py [ROUNDS]`` (default 3 rounds).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time

from _goals import record
from _quick import pick

from harness.engine.case.campaign import Campaign, CampaignSettings
from harness.engine.plan import scenario as scenario_mod
from harness.engine.search.explore import explore
from harness.engine.search.sweep import sweep
from harness.invariants import Status
from harness.systems import resolve

ROUNDS = pick(3, 1)
EXPLORE_BUDGET = pick(60, 6)
#: the issue's goal is for the depth-2 sweep (about 1,200 cases); the quick form sweeps depth 1
DEPTH = pick(2, 1)


def _settings(name: str, seed: int) -> CampaignSettings:
    sc = scenario_mod.load(scenario_mod.resolve_path(name))
    return CampaignSettings(
        system=resolve(sc.system),
        seed=seed,
        runs=sc.runs,
        destinations_per_topic=sc.destinations_per_topic,
    )


def _drop_workdir(campaign: Campaign) -> None:
    if campaign.made_workdir:
        shutil.rmtree(campaign.workdir, ignore_errors=True)


def _explore_settings(seed: int) -> CampaignSettings:
    """``reference-explore`` as the scenario defines it (its provider faults included: they
    are what lets a schedule reach ``before_retry`` and ``before_reconcile``)."""
    sc = scenario_mod.load(scenario_mod.resolve_path("reference-explore"))
    return CampaignSettings(system=resolve(sc.system), seed=seed, **sc.campaign_fields())


def _explore_rates(rounds: int, jobs: int) -> tuple[list[float], list[float], list[float]]:
    """Schedules tried per second, those of them that landed (a drawn schedule whose
    crash or pause never came is tried but tests nothing: a gap, not a pass), and the share
    of drawn schedules whose every step landed (explore learns which combinations land)."""
    rates: list[float] = []
    landed_rates: list[float] = []
    shares: list[float] = []
    for r in range(rounds):
        with Campaign(_explore_settings(100 + r)) as campaign:
            start = time.perf_counter()
            found = explore(
                campaign, budget=EXPLORE_BUDGET, seed=100 + r, database_dir=None, jobs=jobs
            )
            wall = time.perf_counter() - start
        _drop_workdir(campaign)
        rates.append(len(found.tried) / wall)
        landed_rates.append(sum(x.verdict is Status.PASS for x in found.tried) / wall)
        drawn = found.tried[1:]  # the dry run first
        shares.append(sum(x.all_landed for x in drawn) / max(1, len(drawn)))
        bad = [x.spec.id for x in found.tried if x.verdict not in (Status.PASS, Status.GAP)]
        assert not bad, f"explore round {r} (jobs {jobs}): the reference failed {bad}"
    return rates, landed_rates, shares


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    cores = min(2, os.cpu_count() or 1)
    sweep_times: list[float] = []
    cases = 0
    for r in range(1 if DEPTH == 2 else rounds):  # a depth-2 sweep is one long round
        with Campaign(_settings("reference-sweep", 1)) as campaign:
            start = time.perf_counter()
            results, _ = sweep(campaign, depth=DEPTH, jobs=cores)
            sweep_times.append(time.perf_counter() - start)
        _drop_workdir(campaign)
        cases = len(results)
        assert all(x.verdict is Status.PASS for x in results), f"round {r}: a case failed"
    # one search per core, and one more: a search spends part of each case waiting on its
    # workers (a fork, a cgroup join, a lease), which another search can use
    rates = {jobs: _explore_rates(rounds, jobs) for jobs in sorted({1, cores, cores + 1})}
    print(
        f"sweep reference-sweep --depth {DEPTH} --jobs {cores}: {cases} cases (dry run included),"
        f" {len(sweep_times)} round(s)"
    )
    goal = "  (goal <= 60 s)" if DEPTH == 2 else ""
    print(f"  wall time median {statistics.median(sweep_times):6.2f} s{goal}")
    if DEPTH == 2:
        record(
            f"depth-2 sweep of reference-sweep, {cases} cases",
            statistics.median(sweep_times),
            goal=60.0,
            at_most=True,
            unit=" s",
        )
    print(f"explore reference-explore: budget {EXPLORE_BUDGET}, {rounds} rounds")
    for jobs, (values, landed, shares) in rates.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(
            f"  jobs {jobs}: schedules/s median {statistics.median(values):6.2f}"
            f"  (rounds: {shown}; goal >= 30); of them landed {statistics.median(landed):6.2f}/s"
        )
        print(
            f"           landed share median {statistics.median(shares):6.1%}"
            f"  (rounds: {', '.join(f'{x:.0%}' for x in shares)}; goal >= 90 %)"
        )
        record(
            f"explore schedules/s at --jobs {jobs}",
            statistics.median(values),
            goal=30.0,
            at_most=False,
            unit="/s",
        )
        record(
            f"explore landed share at --jobs {jobs}",
            100 * statistics.median(shares),
            goal=90.0,
            at_most=False,
            unit="%",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
