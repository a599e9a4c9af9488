"""What a warm start saves, per framework (issue "Real subjects at CI speed", item 1): the same
cases of an example's sweep run warm (each incarnation forked from the harness, which
imported the program's libraries once) and cold (``CRASH_HARNESS_COLD_START=1``: each
incarnation execs ``python -m ...`` and imports them again), one after the other.

Printed per example: wall and CPU (the harness and everything it started, reaped) a case,
warm and cold, and warm ÷ cold. The cases are the first few of the example's sweep plan
(``sweep --case``), so both runs do the same work; the dry run that discovers the points is
in both. The quick form runs the dry run of one example (Huey's).

    .venv/bin/python benchmarks/bench_warm_start.py [--cases 6] [--rounds 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
from pathlib import Path

from _goals import record
from _harness_run import run_harness
from _quick import QUICK, pick

ROOT = Path(__file__).resolve().parent.parent
#: example scenario -> the framework it needs installed
EXAMPLES = {
    "examples/agents/langgraph_graph/naive.toml": "langgraph",
    "examples/agents/langgraph_functional/naive.toml": "langgraph",
    "examples/agents/dbos_workflow/naive.toml": "dbos",
    "examples/agents/pydantic_ai_dbos/naive.toml": "pydantic_ai",
    "examples/huey_worker/naive.toml": "huey",
}
QUICK_EXAMPLE = "examples/huey_worker/naive.toml"
#: the goal: an incarnation pays the fork, not the interpreter and the imports (on CPU: a
#: case's wall also holds waits a start does not change)
GOAL_RATIO = 0.5


def _harness(words: list[str], out: Path, *, cold: bool) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one harness command, warm or cold, and its report."""
    env = dict(os.environ)
    env.pop("CRASH_HARNESS_COLD_START", None)
    if cold:
        env["CRASH_HARNESS_COLD_START"] = "1"
    return run_harness(words, out, env=env)


def _first_cases(toml: str, count: int, tmp: Path) -> list[str]:
    """The first ``count`` crash cases of the example's sweep plan (from a warm dry run)."""
    _, _, report = _harness(["sweep", toml, "--sample", "0"], tmp / "plan", cold=False)
    ids = [c["id"] for c in report["cases"] if c["id"] != "baseline"]
    return ids[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=pick(6, 1))
    parser.add_argument("--rounds", type=int, default=pick(1, 1))
    args = parser.parse_args()
    examples = list(EXAMPLES.items())
    if QUICK:  # the smallest start: a Huey consumer
        examples = [(QUICK_EXAMPLE, EXAMPLES[QUICK_EXAMPLE])]
    print(f"warm ÷ cold starts: the first {args.cases} case(s) of each example's sweep")
    for toml, framework in examples:
        if importlib.util.find_spec(framework) is None:
            print(f"{toml:48} skipped: {framework} is not installed (its extra)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cases = _first_cases(toml, args.cases, Path(tmp)) if not QUICK else ["baseline"]
            verb = ["run", toml] if QUICK else ["sweep", toml]
            words = [*verb, *(w for c in cases for w in ("--case", c))]
            runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            start = {}
            for n in range(args.rounds):
                for cold in (False, True):
                    wall, cpu, report = _harness(words, Path(tmp) / f"{cold}{n}", cold=cold)
                    runs[cold].append((wall / len(cases), cpu / len(cases)))
                    start[cold] = report.get("start", {})
        warm_wall = statistics.median(w for w, _ in runs[False])
        warm_cpu = statistics.median(c for _, c in runs[False])
        cold_wall = statistics.median(w for w, _ in runs[True])
        cold_cpu = statistics.median(c for _, c in runs[True])
        name = toml.removeprefix("examples/").removesuffix(".toml")
        said = "warm" if start[False].get("warm") else f"cold ({start[False].get('why')})"
        print(
            f"{name:34} a case: warm {warm_wall:5.2f} s wall {warm_cpu:5.2f} s CPU;"
            f" cold {cold_wall:5.2f} s wall {cold_cpu:5.2f} s CPU (medians);"
            f" warm ÷ cold {warm_wall / cold_wall:4.2f} wall, {warm_cpu / cold_cpu:4.2f} CPU"
            f"  [{said}]"
        )
        if not QUICK:  # CPU: a case's wall also holds waits that are no start (a daemon's
            # quiet window, a framework's recovery poll), its CPU holds the starts
            record(
                f"warm ÷ cold start, CPU a case of {name}",
                round(warm_cpu / cold_cpu, 2),
                goal=GOAL_RATIO,
                at_most=True,
            )


if __name__ == "__main__":
    main()
