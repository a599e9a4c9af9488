"""Two runs of one seed say the same thing: the same cases in the same order, each with the
same verdict, invariant results, workers (in the order they were started), effects and
landings. Timestamps, durations, pids and the timeline's interleaving of racing workers are
what may differ: the first three are the machine's, the last is real concurrency.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _what_it_says(report: dict[str, Any]) -> list[dict[str, Any]]:
    def unpid(text: str) -> str:
        return re.sub(r"pid \d+", "pid N", text)

    return [
        {
            "id": c["id"],
            "verdict": c["verdict"],
            "invariants": {n: r["status"] for n, r in c["invariants"].items()},
            "workers": [(w["worker"], w["outcome"], w.get("boundary")) for w in c["workers"]],
            "effects": c["effects"],
            "landings": [(x["step"], x["landing"], unpid(x["detail"])) for x in c["landings"]],
        }
        for c in report["cases"]
    ]


def _explore(tmp_path: Path, n: int) -> dict[str, Any]:
    out = tmp_path / f"r{n}"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "explore", "reference-explore"),
            *("--budget", "10", "--seed", "3", "--report-dir", str(out)),
            *("--examples-dir", str(tmp_path / f"examples{n}")),
        ],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


def test_two_explore_runs_of_one_seed_report_the_same() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        first, second = (_explore(Path(tmp), n) for n in (1, 2))
    said = _what_it_says(first)
    assert len(said) == 11  # the dry run and the budget
    assert said == _what_it_says(second)
    raced = [c for c in said if "concurrent_claim" in c["id"]]
    assert all([w[0] for w in c["workers"]] == sorted(w[0] for w in c["workers"]) for c in raced)
