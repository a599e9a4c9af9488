"""Print the figures ``make bench`` recorded (``benchmarks/_goals.py``) as one table beside
their goals, with the machine they were measured on.

``python benchmarks/summarize.py RECORD_FILE``
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from _machine import tree_setup

# what the table cannot measure in the same run, said rather than left out
NOT_MEASURED_HERE = [
    ("make test on this machine", "<= 10 min", "not run by make bench: `time make test`"),
]


def _value(row: dict[str, object]) -> str:
    return f"{float(row['value']):.2f}{row['unit']}"  # type: ignore[arg-type]


def main(path: str) -> int:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    print()
    print("== summary: every figure with a goal, measured in this run")
    print(f"machine: {os.cpu_count()} cores; worker trees: {tree_setup()}")
    width = max([len(r["figure"]) for r in rows] + [40])
    print(f"{'figure':<{width}}  {'now':>10}  {'goal':>10}  met")
    for r in rows:
        goal = ("<= " if r["at_most"] else ">= ") + _value({**r, "value": r["goal"]})
        print(f"{r['figure']:<{width}}  {_value(r):>10}  {goal:>10}  {'yes' if r['met'] else 'NO'}")
    for figure, goal, why in NOT_MEASURED_HERE:
        print(f"{figure:<{width}}  {'-':>10}  {goal:>10}  ({why})")
    met = sum(1 for r in rows if r["met"])
    print(f"{met} of {len(rows)} goals met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
