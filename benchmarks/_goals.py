"""Every figure a goal is set for, recorded as it is measured, so ``make bench`` can end with
one table of figure, value and goal, all from the one run.

A benchmark calls ``record`` beside the line it prints; with ``CRASH_HARNESS_BENCH_RECORD``
naming a file (``make bench`` sets it), each figure is appended there as a JSON line and
``benchmarks/summarize.py`` prints the table. Without it, nothing is written.
"""

from __future__ import annotations

import json
import os

RECORD_ENV = "CRASH_HARNESS_BENCH_RECORD"


def record(figure: str, value: float, *, goal: float, at_most: bool, unit: str = "x") -> None:
    """Note one measured ``figure`` against its ``goal`` (``at_most``: lower is better)."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    met = value <= goal if at_most else value >= goal
    line = {"figure": figure, "value": value, "goal": goal, "at_most": at_most, "unit": unit}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**line, "met": met}) + "\n")
