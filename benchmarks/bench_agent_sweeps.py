"""How long a sweep of each agent example takes (issue "Agents as they ship": at most two
minutes on a 2-core runner): the naive scenario of each, swept whole as a user runs it
(``crash-harness sweep examples/agents/NAME/naive.toml``), and per case.

Each case starts the agent's program two or three times (the crashed incarnation, then the
ones that finish the work), and a framework's import is most of an agent's start, so the
per-case figure is printed beside one bare start of the same program (``python -m ...
--help`` is not a start: the agent's own import of its framework is timed,
``python -c 'import MODULE'``). The quick form runs the first installed example's dry run only.

    .venv/bin/python benchmarks/bench_agent_sweeps.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _goals import record
from _harness_run import run_harness
from _quick import QUICK, pick

ROOT = Path(__file__).resolve().parent.parent
#: the goal the issue sets for one example's sweep, seconds
GOAL_S = 120.0
#: example -> (the module its framework is, the program's module)
EXAMPLES = {
    "langgraph_graph": ("langgraph", "examples.agents.langgraph_graph.naive"),
    "langgraph_functional": ("langgraph", "examples.agents.langgraph_functional.naive"),
    "dbos_workflow": ("dbos", "examples.agents.dbos_workflow.naive"),
    "pydantic_ai_dbos": ("pydantic_ai", "examples.agents.pydantic_ai_dbos.naive"),
}


def _sweep(name: str, out: Path) -> tuple[float, int]:
    """Wall seconds of one sweep (the dry run alone in the quick form), and its cases."""
    toml = f"examples/agents/{name}/naive.toml"
    words = ["run", toml, "--case", "baseline"] if QUICK else ["sweep", toml]
    took, _, report = run_harness(words, out)
    return took, len(report["cases"])


def _import_s(module: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=pick(1, 1))
    args = parser.parse_args()
    print(f"agent sweeps: {'dry runs only (quick form)' if QUICK else 'whole naive sweeps'}")
    ran = 0
    for name, (framework, program) in EXAMPLES.items():
        if importlib.util.find_spec(framework) is None:
            print(f"{name:22} skipped: {framework} is not installed (its extra)")
            continue
        if QUICK and ran:  # the quick form: one example's dry run keeps the code alive
            continue
        ran += 1
        runs = []
        with tempfile.TemporaryDirectory() as tmp:
            for n in range(args.rounds):
                runs.append(_sweep(name, Path(tmp) / f"r{n}"))
        took = statistics.median(t for t, _ in runs)
        cases = runs[0][1]
        start = statistics.median(_import_s(program) for _ in range(3))
        print(
            f"{name:22} median {took:6.1f} s  {cases:3d} case(s), {took / cases:4.1f} s a case;"
            f" one start of the agent (its imports) {start:4.2f} s"
        )
        if not QUICK:
            record(f"sweep of {name} (naive)", round(took, 1), goal=GOAL_S, at_most=True, unit="s")


if __name__ == "__main__":
    main()
