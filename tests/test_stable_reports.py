"""Two runs of one seed write the same reports, byte for byte, once the machine's own numbers
are set aside: timestamps, durations, pids, the work dir's random name, and the timeline of a
case whose workers race each other (which racer claims which item first is real concurrency,
not the harness's choice). The reference's liveness watchdog is set aside too: it flags a
delivery left due for half a second of *wall* time, so a slow machine sees more of them (the
verdict stays the same; its evidence, the audit log's length and the timeline's notes do not).
Everything else, including the order of cases, workers, invariants and evidence, must not move.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: keys whose values are the machine's clock (absolute, or seconds into the case)
TIMESTAMPS = {"started_at", "ended_at", "finished_at", "flagged_at", "t"}
#: keys whose values are how long something took on this machine
DURATIONS = {"duration_s", "detection_s", "waited_s", "max_detection_s", "schedules_per_second"}


def _text(value: str) -> str:
    value = re.sub(r"pid \d+", "pid N", value)
    return re.sub(r"\b\d+(\.\d+)?s\b", "Ns", value)


def _set_aside(value: Any, key: str = "") -> Any:
    """The report with the machine's numbers replaced by placeholders."""
    if key in TIMESTAMPS:
        return "<time>"
    if key in DURATIONS:
        return "<duration>"
    if key == "pid":
        return "<pid>"
    if key == "workdir":
        return "<workdir>"
    if key == "liveness" and isinstance(value, dict):
        return {**value, "summary": "<watchdog>", "evidence": "<watchdog>"}
    if key == "audit_events":
        return "<count, watchdog flags included>"
    if isinstance(value, dict):
        if "concurrent_claim" in str(value.get("id", "")) and "timeline" in value:
            value = {**value, "timeline": "<racing workers' interleaving>"}
        elif "timeline" in value:
            timeline = [e for e in value["timeline"] if "overdue" not in str(e.get("label"))]
            value = {**value, "timeline": timeline}
        return {k: _set_aside(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_set_aside(v) for v in value]
    if isinstance(value, str):
        return _text(value)
    return value


def _explore(tmp_path: Path, n: int) -> Path:
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
    return out


def _json_bytes(out: Path) -> str:
    return json.dumps(_set_aside(json.loads((out / "report.json").read_text())), indent=1)


def _first_difference(a: Any, b: Any, where: str = "report") -> str | None:
    """Where two set-aside reports first differ, key order included, for the failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{where}: keys {list(a)} != {list(b)}"
        found = (_first_difference(a[k], b[k], f"{where}.{k}") for k in a)
        return next((f for f in found if f), None)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        found = (_first_difference(x, y, f"{where}[{i}]") for i, (x, y) in pairs)
        return next((f for f in found if f), None)
    return None if a == b else f"{where}: {a!r:.200} != {b!r:.200}"


def _numbers_aside(text: str) -> str:
    text = re.sub(r'(timestamp|time)="[^"]*"', r'\1="N"', text)
    return re.sub(r"\d+\.\d+", "N", _text(text))


def test_two_explore_runs_of_one_seed_write_the_same_reports() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        first, second = (_explore(Path(tmp), n) for n in (1, 2))
        report = json.loads((first / "report.json").read_text())
        assert len(report["cases"]) == 11  # the dry run and the budget
        raced = [c for c in report["cases"] if "concurrent_claim" in c["id"]]
        assert raced, "the seed no longer draws a race; pick one that does"
        for case in raced:  # racers are listed in the order they were started
            names = [w["worker"] for w in case["workers"]]
            assert names == sorted(names), names
        a, b = (_set_aside(json.loads((d / "report.json").read_text())) for d in (first, second))
        assert _first_difference(a, b) is None
        assert _json_bytes(first) == _json_bytes(second)
        for name in ("report.md", "report.xml"):
            a, b = ((d / name).read_text() for d in (first, second))
            assert _numbers_aside(a) == _numbers_aside(b), name
