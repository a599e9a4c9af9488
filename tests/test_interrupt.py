"""Ctrl-C in the middle of a campaign leaves no worker and no provider behind."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


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
    try:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "the worker never started"
        finally:
            os.close(fd)
        running = _processes_with(marker)
        assert len(running) >= 3  # harness, provider, hung worker
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    left = [p for p in _processes_with(marker) if p != os.getpid()]
    details = {p: Path(f"/proc/{p}/status").read_text()[:300] for p in left}
    assert left == [], f"left behind: {details}"
