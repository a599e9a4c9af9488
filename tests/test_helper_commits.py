"""Certify tries the gap after every use of a helper that commits (issue "Real subjects at
CI speed", item 2): a worker's commits made through one helper are one discovered point
(the helper's line) with a hit per use, and certify used to crash only hit #1 of each point,
the helper's first use. The dry run records which of the worker's lines called into each
point (``point_callers``), and certify crashes the first hit from each caller too.

tests/_helper_commit_worker.py clears its key when it marks a delivery sent, the helper's
second use: only a crash after that commit and before the third shows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMAND = (
    "DATABASE_URL={db.url} WEBHOOK_URL={provider.url}/hooks "
    "WEBHOOK_TOKEN={provider.credential} python -m tests._helper_commit_worker"
)


def _certify(
    tmp_path: Path, *args: str, extra: list[str] | None = None
) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "report"
    words = ['provider_preset="webhook"', "provider_faults=[]", "runs=1"]
    words.append("destinations_per_topic=1")
    done = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "harness",
                "certify",
                "--system-cmd",
                " ".join([COMMAND, *args]),
            ),
            *(w for word in words for w in ("--set", word)),
            *("--seed", "1", "--report-dir", str(out)),
            *(extra or []),
        ],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, json.loads((out / "report.json").read_text())


def _helper_point(report: dict[str, Any]) -> str:
    """The one commit point three callers reach: the helper's line."""
    callers = report["cases"][0]["point_callers"]
    (point,) = [p for p, c in callers.items() if p.startswith("after_commit.") and len(c) == 3]
    assert list(callers[point].values()) == [1, 2, 3], callers[point]
    return point


def _verdicts(report: dict[str, Any]) -> dict[str, tuple[str, set[str]]]:
    return {
        c["id"]: (c["verdict"], {n for n, r in c["invariants"].items() if r["status"] == "fail"})
        for c in report["cases"]
    }


def test_certify_crashes_after_each_callers_use_of_a_committing_helper(tmp_path: Path) -> None:
    code, said, report = _certify(tmp_path)
    assert code == 1, said
    point = _helper_point(report)
    helper = point.removeprefix("after_commit.")
    assert helper == f"_helper_commit_worker.{_helper_line()}", helper
    # the dry run's listing says why certify crashes #2 and #3
    listed = next(ln for ln in said.splitlines() if ln.strip().startswith(point))
    assert "[3 callers: #1 _helper_commit_worker." in listed, listed
    assert ", #2 _helper_commit_worker." in listed, listed
    planned = report["plan"]["cases"]
    for kind in ("before_commit", "after_commit"):
        for hit in (1, 2, 3):
            assert f"crash@{kind}.{helper}#{hit}" in planned, planned
    verdicts = _verdicts(report)
    # the claim (the helper's first use) is harmless; after the second, the key is gone
    assert verdicts[f"crash@{point}#1"] == ("pass", set()), said
    assert verdicts[f"crash@{point}#2"][1] >= {"exactly_once_effect"}, said
    assert verdicts[f"crash@before_commit.{helper}#3"][1] >= {"exactly_once_effect"}, said
    assert "replay: crash-harness certify" in said, said


def _helper_line() -> int:
    """The line of the helper's commit (its ``with db.begin()``): the point's WHERE."""
    source = (ROOT / "tests" / "_helper_commit_worker.py").read_text().splitlines()
    start = source.index("def save(db, sql, **params):")
    return start + 2  # its next line, 1-based


def test_a_worker_that_keeps_its_key_holds_at_every_callers_use(tmp_path: Path) -> None:
    """The same crashes against the worker that keeps its key: no false alarm (only those
    cases, by --case: the plan is the test above's)."""
    helper = f"_helper_commit_worker.{_helper_line()}"
    cases = [f"crash@{kind}.{helper}#0" for kind in ("before_commit", "after_commit")]
    picked = [w for c in cases for hit in (2, 3) for w in ("--case", c[:-1] + str(hit))]
    code, said, report = _certify(tmp_path, "fixed", extra=picked)
    assert code == 0, said
    verdicts = _verdicts(report)
    assert sorted(verdicts) == sorted(c[:-1] + str(h) for c in cases for h in (2, 3)), said
    assert all(v == ("pass", set()) for v in verdicts.values()), said


def test_point_callers_reads_each_callers_first_hit() -> None:
    """The trace reading alone: hits in any order, each caller's first hit kept."""
    from harness.engine.store.trace import TraceEvent, point_callers

    def hit(n: int, via: str | None) -> TraceEvent:
        detail = {"target": "x"} if via is None else {"target": "x", "via": via}
        return TraceEvent(0.0, "hit", "w1", 1, "after_commit.w.9", n, detail)

    events = [hit(3, "w.20"), hit(1, "w.10"), hit(2, "w.20"), hit(4, None), hit(5, "w.10")]
    assert point_callers(events) == {"after_commit.w.9": {"w.10": 1, "w.20": 2}}
