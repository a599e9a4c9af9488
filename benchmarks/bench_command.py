"""Whole commands, interpreter start included, against what a user would script by hand.

Measured in this one run, rounds interleaved so drift weighs on both sides alike; medians:

- one crash point of the outbox example (``crash-harness run outbox.toml --case
  'crash@after_provider_accept#1'``) against ``_handwritten_outbox.py`` (fork, SIGKILL after
  the first accept, restart, count at a loopback provider) (goal <= 1.0x);
- the same crash point against ``_handwritten_stdlib.py``, the ~20-line kill script a user
  writes with the standard library only (its own worker on a SQLite file, a threaded
  ``http.server`` fake that SIGKILLs it when the first POST arrives, a restart, a count)
  (goal <= 1.5x);
- the sweep of that worker (``crash-harness sweep outbox.toml``: dry run, baseline, a crash
  after each of the six accepts and one at each accept as the provider sees it, 13 cases)
  against the same 13 by hand (``--sweep``) (goal <= 1.0x);
- ``crash-harness --version`` and ``--help`` against ``python -c pass`` (goal <= 0.2 s).

Every outbox command must say what it exists to say (exit 1: the duplicate is found).

Bytecode is written (``PYTHONDONTWRITEBYTECODE`` dropped) and one untimed round runs first:
an installed harness has its ``.pyc`` files, as the libraries on the by-hand side have theirs,
so a development tree's missing cache is not timed as the command's start.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _goals import record
from _machine import tree_setup
from _quick import pick

ROOT = Path(__file__).resolve().parent.parent
OUTBOX = ROOT / "examples" / "outbox"
BIN = Path(sys.executable).parent
ROUNDS = pick(5, 1)


def _timed(argv: list[str], *, cwd: Path, expect: int, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(
            f"{' '.join(argv)} exited {proc.returncode}, expected {expect}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return elapsed


def main() -> int:
    env = dict(os.environ, PYTHONPATH=str(OUTBOX))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    harness = str(BIN / "crash-harness")
    hand = [sys.executable, str(ROOT / "benchmarks" / "_handwritten_outbox.py")]
    stdlib = [sys.executable, str(ROOT / "benchmarks" / "_handwritten_stdlib.py")]
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-command-") as tmp:
        reports = ["--report-dir", tmp]
        point = ["run", "outbox.toml", "--case", "crash@after_provider_accept#1", *reports]
        sides = {
            "point, crash-harness": ([harness, *point], 1),
            "point, by hand": (hand, 1),
            "point, stdlib script": (stdlib, 1),
            "sweep, crash-harness": ([harness, "sweep", "outbox.toml", *reports], 1),
            "sweep, by hand": ([*hand, "--sweep"], 1),
            "--version": ([harness, "--version"], 0),
            "--help": ([harness, "--help"], 0),
            "python -c pass": ([sys.executable, "-c", "pass"], 0),
        }
        for round_ in range(ROUNDS + 1):  # round 0 writes the bytecode caches, untimed
            for name, (argv, expect) in sides.items():
                took = _timed(argv, cwd=OUTBOX, expect=expect, env=env)
                if round_:
                    times.setdefault(name, []).append(took)
    med = {name: statistics.median(values) for name, values in times.items()}
    print(f"whole commands, interpreter start included: medians of {ROUNDS} round(s)")
    print(f"worker trees: {tree_setup()}")
    for name, value in med.items():
        print(f"  {name:<22} {value:6.3f} s")
    point_ratio = med["point, crash-harness"] / med["point, by hand"]
    stdlib_ratio = med["point, crash-harness"] / med["point, stdlib script"]
    sweep_ratio = med["sweep, crash-harness"] / med["sweep, by hand"]
    print(f"ratio one crash point, harness / by hand: {point_ratio:5.2f}x  (goal <= 1.0x)")
    print(f"ratio one crash point, harness / stdlib script: {stdlib_ratio:5.2f}x  (goal <= 1.5x)")
    print(f"ratio sweep of 13 cases, harness / by hand: {sweep_ratio:5.2f}x  (goal <= 1.0x)")
    print(f"--version {med['--version']:.3f} s, --help {med['--help']:.3f} s  (goal <= 0.2 s)")
    record("one crash point, command / by hand", point_ratio, goal=1.0, at_most=True)
    record("one crash point, command / stdlib script", stdlib_ratio, goal=1.5, at_most=True)
    record("sweep of 13 cases, command / by hand", sweep_ratio, goal=1.0, at_most=True)
    slowest = max(med["--version"], med["--help"])
    record("--version / --help", slowest, goal=0.2, at_most=True, unit="s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
