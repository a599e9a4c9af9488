"""The pytest plugin under pytest-xdist: ``-n 2`` spreads a marked test's sweep over both
workers (one item per shard), and the cases the shards ran, with their verdicts, are the
serial run's. An expected violation is a question about the whole campaign: one shard runs
all of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("xdist")

ROOT = Path(__file__).resolve().parent.parent

TESTS = """
import pytest

SMALL = dict(runs=1, destinations_per_topic=1, coverage=False)

@pytest.mark.crash_sweep("mutant:transcript_rebuild", **SMALL)
def test_mutant():
    pass

@pytest.mark.crash_sweep("reference", **SMALL)
def test_reference():
    pass

@pytest.mark.crash_sweep(
    "mutant:transcript_rebuild", expect_violation="no_restart_duplicates", **SMALL
)
def test_expected():
    pass
"""


def _pytest(where: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"),
            *("--crash-report-dir", "reports", "--crash-seed", "2", *args, "test_sweeps.py"),
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CRASH_HARNESS_TMPDIR": str(where)},
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _verdicts(where: Path, test: str) -> dict[str, tuple[str, frozenset[str]]]:
    """case id -> (verdict, failed invariants), over every report one test wrote."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for path in sorted((where / "reports").glob(f"*{test}*/**/report.json")):
        report: dict[str, Any] = json.loads(path.read_text())
        for case in report["cases"]:
            failed = frozenset(n for n, r in case["invariants"].items() if r["status"] == "fail")
            assert case["id"] not in found, f"{case['id']} ran in two shards"
            found[case["id"]] = (case["verdict"], failed)
    return found


def test_two_xdist_workers_split_a_sweep_and_find_what_the_serial_run_finds(
    tmp_path: Path,
) -> None:
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    for where in (serial, parallel):
        where.mkdir()
        (where / "test_sweeps.py").write_text(TESTS)
    code, said = _pytest(serial)
    assert code == 1, said
    assert "1 failed, 2 passed" in said, said
    code, said = _pytest(parallel, "-n", "2", "-rA")
    assert code == 1, said
    # each marked test is two items; the expected violation is judged whole by shard 1
    for item in (
        "FAILED test_sweeps.py::test_mutant[crash-shard-1of2]",
        "FAILED test_sweeps.py::test_mutant[crash-shard-2of2]",
        "PASSED test_sweeps.py::test_reference[crash-shard-1of2]",
        "PASSED test_sweeps.py::test_reference[crash-shard-2of2]",
        "PASSED test_sweeps.py::test_expected[crash-shard-1of2]",
        "an expected violation is judged by shard 1, whole",
    ):
        assert item in said, (item, said)
    for test in ("test_mutant", "test_reference", "test_expected"):
        alone, split = _verdicts(serial, test), _verdicts(parallel, test)
        assert alone, f"{test}: the serial run wrote no report"
        assert split == alone, test
    assert any(v == "fail" for v, _ in _verdicts(serial, "test_mutant").values())
