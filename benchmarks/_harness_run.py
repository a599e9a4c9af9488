"""One harness command as a user types it (``python -m harness ...`` in the checkout), timed:
what the benchmarks that compare whole commands share."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_harness(
    words: list[str], out: Path, *, env: Mapping[str, str] | None = None
) -> tuple[float, float, dict[str, Any]]:
    """Wall and CPU seconds (the harness and every process it started and reaped) of
    ``crash-harness WORDS --determinism 0 --report-dir OUT``, and the report it wrote; exits
    naming the command if it did not end with a verdict (0 or 1)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *words, "--determinism", "0", "--report-dir", str(out)],
        cwd=ROOT,
        env=dict(os.environ if env is None else env),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"{' '.join(words)}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads((out / "report.json").read_text())
