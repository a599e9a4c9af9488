"""Where an explore schedule's CPU goes, and the throughput that CPU allows on this machine.

Explore's rate is bounded by CPU, not by waiting: a schedule is a handful of real worker
incarnations (fork, run, SIGKILL or exit, reap), a provider answering their requests, and the
harness preparing, driving and judging the case. This measures each part in one run, as CPU
milliseconds per schedule (medians over rounds), next to the cost of a bare
fork + SIGKILL + reap of this same process, and prints the ceiling the total allows:
``cores x 1000 / CPU ms per schedule`` schedules per second, however well jobs overlap.

``python benchmarks/bench_schedule_cost.py [ROUNDS] [BUDGET]`` (default 3 rounds of 60).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass

from _goals import record
from _quick import pick

from harness.engine.case.campaign import Campaign, CampaignSettings
from harness.engine.plan import scenario as scenario_mod
from harness.engine.search.explore import explore
from harness.systems import resolve

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Round:
    schedules: int
    incarnations: int
    wall_s: float
    parent_s: float
    workers_user_s: float
    workers_sys_s: float
    provider_s: float


def _process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _one_round(budget: int, seed: int) -> Round:
    sc = scenario_mod.load(scenario_mod.resolve_path("reference-explore"))
    settings = CampaignSettings(
        system=resolve(sc.system),
        seed=seed,
        runs=sc.runs,
        destinations_per_topic=sc.destinations_per_topic,
    )
    with Campaign(settings) as campaign:
        assert campaign.provider is not None
        provider_pid = campaign.provider.pid
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        prov0 = _process_cpu_s(provider_pid)
        start = time.perf_counter()
        found = explore(campaign, budget=budget, seed=seed, database_dir=None, jobs=1)
        wall = time.perf_counter() - start
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        prov1 = _process_cpu_s(provider_pid)
    if campaign.made_workdir:
        shutil.rmtree(campaign.workdir, ignore_errors=True)
    return Round(
        schedules=len(found.tried),
        incarnations=sum(len(r.workers) for r in found.tried),
        wall_s=wall,
        parent_s=(self1.ru_utime - self0.ru_utime) + (self1.ru_stime - self0.ru_stime),
        workers_user_s=kids1.ru_utime - kids0.ru_utime,
        workers_sys_s=kids1.ru_stime - kids0.ru_stime,
        provider_s=prov1 - prov0,
    )


def _bare_fork_kill_reap(n: int = 60) -> tuple[float, float]:
    """(CPU ms, wall ms) medians of fork + SIGKILL + reap of this process, nothing run."""
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(n):
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            signal.pause()
            os._exit(0)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        wall.append((time.perf_counter() - start) * 1000)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = (self1.ru_utime - self0.ru_utime) + (self1.ru_stime - self0.ru_stime)
        spent += (kids1.ru_utime - kids0.ru_utime) + (kids1.ru_stime - kids0.ru_stime)
        cpu.append(spent * 1000)
    return statistics.median(cpu), statistics.median(wall)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else pick(3, 1)
    budget = int(sys.argv[2]) if len(sys.argv) > 2 else pick(60, 6)
    results = [_one_round(budget, 200 + r) for r in range(rounds)]
    bare_cpu, bare_wall = _bare_fork_kill_reap()
    cores = os.cpu_count() or 1

    def per_schedule(value: float, r: Round) -> float:
        return value * 1000 / r.schedules

    def med(key: str) -> float:
        return statistics.median(per_schedule(getattr(r, key), r) for r in results)

    parent, w_user, w_sys, prov = (
        med("parent_s"),
        med("workers_user_s"),
        med("workers_sys_s"),
        med("provider_s"),
    )
    total = parent + w_user + w_sys + prov
    incarnations = statistics.median(r.incarnations / r.schedules for r in results)
    per_incarnation = statistics.median(
        (r.workers_user_s + r.workers_sys_s) * 1000 / r.incarnations for r in results
    )
    rate = statistics.median(r.schedules / r.wall_s for r in results)
    print(f"explore reference-explore, one search, budget {budget}, {rounds} rounds (medians)")
    print(f"  schedules/s (one search)           {rate:7.2f}")
    print(f"  worker incarnations per schedule   {incarnations:7.2f}")
    print("CPU ms per schedule")
    print(f"  harness (prepare, fork, judge)     {parent:7.1f}")
    print(f"  workers, user                      {w_user:7.1f}")
    print(f"  workers, kernel                    {w_sys:7.1f}")
    print(f"  provider                           {prov:7.1f}")
    print(f"  total                              {total:7.1f}")
    print(f"CPU ms per worker incarnation        {per_incarnation:7.1f}")
    print(f"bare fork + SIGKILL + reap           {bare_cpu:7.2f} CPU ms, {bare_wall:.2f} ms wall")
    print(f"  incarnation / bare fork+kill+reap  {per_incarnation / bare_cpu:7.1f}x  (goal <= 2x)")
    record(
        "CPU a worker incarnation / bare fork+kill+reap",
        per_incarnation / bare_cpu,
        goal=2.0,
        at_most=True,
    )
    print(
        f"ceiling on {cores} cores: {cores * 1000 / total:.1f} schedules/s at full use"
        f" (workers alone: {cores * 1000 / (w_user + w_sys):.1f}/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
