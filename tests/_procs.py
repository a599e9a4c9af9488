"""Watching the processes a test starts: readiness on a FIFO, and who carries a marker."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest


def wait_ready(fifo: Path, timeout_s: float = 60) -> None:
    """Block until a worker writes to ``fifo`` (``CH_TEST_READY_FIFO``), never a sleep."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        assert ready, "the worker never started"
    finally:
        os.close(fd)


def processes_with(marker: str) -> list[int]:
    """Every process but this one whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def describe_stuck(pid: int) -> str:
    """What a process that did not end is doing, for a failure message: its state, signal
    masks, where each of its threads waits in the kernel, and its children."""
    out = []
    for task in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}") else []:
        base = f"/proc/{pid}/task/{task}"
        try:
            status = Path(f"{base}/status").read_text()
            wchan = Path(f"{base}/wchan").read_text()
            try:
                stack = Path(f"{base}/stack").read_text()
            except OSError:
                stack = ""
        except OSError:
            continue
        keep = [ln for ln in status.splitlines() if ln.startswith(("Name", "State", "Sig", "Shd"))]
        out.append(f"thread {task}: {'; '.join(keep)}; wchan {wchan}\n{stack}")
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
            state = Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        out.append(f"child {child} [{state}]: {cmd.decode(errors='replace')}")
    return "\n".join(out) or f"pid {pid}: gone"


def interrupt_when_ready(
    proc: subprocess.Popen[str],
    fifo: Path,
    *,
    ready_s: float = 60,
    check: Callable[[], None] | None = None,
    sig: signal.Signals = signal.SIGINT,
) -> str:
    """Once a worker of ``proc`` says it runs (``fifo``), ``check`` what is up, send ``sig``
    and wait for the end (a failure naming what ``proc`` is stuck in if it does not end
    within a minute); its stderr. ``proc`` never outlives the call."""
    try:
        wait_ready(fifo, ready_s)
        if check is not None:
            check()
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no end 60 s after {sig.name}:\n{describe_stuck(proc.pid)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err
