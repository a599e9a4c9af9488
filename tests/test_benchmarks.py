"""Every benchmark runs to the end in its quick form, so `make bench` cannot rot.

The quick form's figures are too few to quote; what is checked is that each script finishes,
exits 0 and prints the medians and ratios it exists to print.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("bench_*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 6, BENCHMARKS


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_runs_to_the_end_in_its_quick_form(script: Path) -> None:
    env = dict(os.environ, CRASH_HARNESS_BENCH_QUICK="1")
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
