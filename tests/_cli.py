"""Running ``python -m harness`` as a user would, for tests that judge what it printed and the
report it wrote: this checkout on the import path, scratch under the test's tmp dir, no
colour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def harness_proc(
    cwd: Path, tmp_path: Path, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m harness ARGS`` in ``cwd``, its scratch dirs under ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=dict(
            os.environ, PYTHONPATH=str(ROOT), CRASH_HARNESS_TMPDIR=str(tmp_path), NO_COLOR="1"
        ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_harness(
    cwd: Path, tmp_path: Path, *args: str, report_dir: Path | None = None, timeout: float = 600
) -> tuple[int, str, dict[str, Any]]:
    """Exit status, everything printed, and report.json (``{}`` when none was written)."""
    out = report_dir if report_dir is not None else tmp_path / "r"
    proc = harness_proc(cwd, tmp_path, *args, "--report-dir", str(out), timeout=timeout)
    path = out / "report.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, report
