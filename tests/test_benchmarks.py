"""Every benchmark runs to the end in its quick form, so `make bench` cannot rot.

The quick form's figures are too few to quote; what is checked is that each script finishes,
exits 0 and prints the medians and ratios it exists to print.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("bench_*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 6, BENCHMARKS


#: the benchmarks that measure a figure an issue (#27, #32) sets a goal for, and the figures
#: each records
GOAL_FIGURES = {
    "bench_command": [
        "one crash point, command / by hand",
        "one crash point, command / stdlib script",
        "sweep of 13 cases, command / by hand",
        "--version / --help",
    ],
    "bench_jobs": ["sweep --jobs 2 / --jobs 1 speed-up"],
    "bench_cycle": ["crash-restart cycle / bare fork+commit+POST+kill"],
    "bench_wall": ["crash-restart cycle behind the wall / bare"],
    "bench_schedule_cost": ["CPU a worker incarnation / bare fork+kill+reap"],
    # the quick form sweeps depth 1, which has no goal: the depth-2 figure is make bench's
    "bench_sweep_explore": [
        f"explore {what} at --jobs {jobs}"
        for jobs in (1, 2, 3)
        for what in ("schedules/s", "landed share")
    ],
    "bench_hooks": ["disarmed hooks, worker CPU / plain"],
    # issue #32: a stopped provider noticed in seconds
    "bench_provider_stall": ["SIGSTOPped provider noticed after"],
}


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_runs_to_the_end_in_its_quick_form(script: Path, tmp_path: Path) -> None:
    """Each benchmark, once: it ends, prints its medians and, when it measures a figure an
    issue sets a goal for, records exactly those figures, which the summary then judges
    (one run serves both: a benchmark run twice was a minute of the suite)."""
    record = tmp_path / "record.jsonl"
    env = dict(os.environ, CRASH_HARNESS_BENCH_QUICK="1", CRASH_HARNESS_BENCH_RECORD=str(record))
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "median" in proc.stdout, proc.stdout
    rows = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    assert [r["figure"] for r in rows] == GOAL_FIGURES.get(script.stem, []), rows
    if not rows:
        return
    summary = subprocess.run(
        [sys.executable, str(BENCHMARKS[0].parent / "summarize.py"), str(record)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for row in rows:
        line = next(ln for ln in summary.splitlines() if ln.startswith(row["figure"]))
        verdict = "yes" if row["met"] else "NO"
        assert line.split()[-1] == verdict, line
        assert ("<=" if row["at_most"] else ">=") in line, line


def test_every_benchmark_with_a_goal_exists() -> None:
    assert set(GOAL_FIGURES) <= {p.stem for p in BENCHMARKS}, set(GOAL_FIGURES)


def test_the_summary_says_no_where_a_goal_is_missed_and_yes_where_it_is_met(
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.jsonl"
    env = dict(os.environ, CRASH_HARNESS_BENCH_RECORD=str(record))
    code = (
        "from _goals import record\n"
        "record('fast enough', 0.9, goal=1.0, at_most=True)\n"
        "record('too slow', 1.4, goal=1.3, at_most=True)\n"
        "record('rate', 12.0, goal=30.0, at_most=False, unit='/s')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=BENCHMARKS[0].parent, check=True, timeout=60
    )
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS[0].parent / "summarize.py"), str(record)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    said = {ln.split("  ")[0].strip(): ln.split()[-1] for ln in out.splitlines() if "  " in ln}
    assert said["fast enough"] == "yes"
    assert said["too slow"] == "NO"
    assert said["rate"] == "NO"
    assert "12.00/s" in out
    assert ">= 30.00/s" in out
    assert "1 of 3 goals met" in out
