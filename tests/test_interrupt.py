"""Ctrl-C in the middle of a campaign leaves no worker and no provider behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests._procs import describe_stuck, interrupt_when_ready, processes_with, wait_ready

ROOT = Path(__file__).resolve().parent.parent


def test_sigint_mid_campaign_leaves_no_process(tmp_path: Path) -> None:
    """SIGINT while a worker runs: the command exits, and no process it started survives."""
    marker = f"CH_TEST_MARKER={uuid.uuid4().hex}"
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    env = dict(os.environ, PYTHONPATH=str(ROOT), CH_TEST_READY_FIFO=str(fifo))
    key, value = marker.split("=")
    env[key] = value
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "certify",
            "--system",
            "tests._systems:HANGS",
            "--case",
            "baseline",
            "--seed",
            "1",
            "--report-dir",
            str(tmp_path / "r"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def up() -> None:
        assert len(processes_with(marker)) >= 3  # harness, provider, hung worker

    err = interrupt_when_ready(proc, fifo, check=up)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    left = [p for p in processes_with(marker) if p != os.getpid()]
    details = {p: Path(f"/proc/{p}/status").read_text()[:300] for p in left}
    assert left == [], f"left behind: {details}"


_SCENARIO = """\
[scenario]
system = "tests._systems:HANGS_LATER"
[cases]
mode = "list"
list = ["baseline", "crash@after_claim#1"]
"""


@pytest.mark.parametrize(
    ("sig", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated by SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
def test_an_interrupted_run_writes_its_partial_report(
    tmp_path: Path, sig: signal.Signals, status: int, said: str
) -> None:
    """Ctrl-C or SIGTERM in `run` after one case finished: the partial report holds that
    case, the work dir is kept and named, and the exit status and line say which signal."""
    scenario = tmp_path / "two.toml"
    scenario.write_text(_SCENARIO)
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CH_TEST_READY_FIFO=str(fifo),
        CH_TEST_HANGS_LATER_MARKER=str(tmp_path / "marker"),
    )
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(scenario), "--report-dir", str(out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(fifo, 120)
        proc.send_signal(sig)
        try:
            stdout, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no end 60 s after the signal:\n{describe_stuck(proc.pid)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, stdout + err
    assert f"{said}; every worker and provider was stopped" in err
    assert f"partial report (1 case(s)): {out / 'report.json'}" in err
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True
    assert [c["id"] for c in report["cases"]] == ["baseline"]
    assert report["summary"]["not_run"] == 1
    kept = Path(err.split("work dir kept: ", 1)[1].split()[0])
    assert kept.is_dir()
