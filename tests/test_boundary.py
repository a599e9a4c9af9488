"""The boundary call: free when disarmed, a real SIGKILL with a trace line when armed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import boundary
from harness.engine.process import _boundary
from harness.engine.process._boundary import Arm


def _run_forked(fn: object) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            fn()  # type: ignore[operator]
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status


def test_disarmed_boundary_is_a_no_op() -> None:
    """With nothing configured, boundary() returns and records nothing."""
    assert _boundary._tracer is None
    assert boundary("after_claim") is None


def test_armed_crash_kills_with_sigkill_after_recording(tmp_path: Path) -> None:
    """The 2nd hit of an armed boundary writes a crash line, then the process dies by SIGKILL."""
    trace = tmp_path / "trace.jsonl"

    def child() -> None:
        _boundary.configure(trace_path=str(trace), worker="w1", arms=[Arm("after_claim", 2)])
        boundary("after_claim")
        boundary("after_ack")
        boundary("after_claim")
        os.write(1, b"survived\n")

    status = _run_forked(child)
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert [(x["event"], x["boundary"], x["hit"]) for x in lines] == [
        ("hit", "after_claim", 1),
        ("hit", "after_ack", 1),
        ("crash", "after_claim", 2),
    ]


def test_exceptions_cannot_swallow_the_crash(tmp_path: Path) -> None:
    """A worker's broad except/finally does not run: the crash is a signal, not an exception."""
    trace = tmp_path / "trace.jsonl"
    marker = tmp_path / "finally-ran"

    def child() -> None:
        _boundary.configure(trace_path=str(trace), worker="w1", arms=[Arm("x", 1)])
        try:
            boundary("x")
        except BaseException:
            pass
        finally:
            marker.write_text("ran")

    status = _run_forked(child)
    assert os.WTERMSIG(status) == signal.SIGKILL
    assert not marker.exists()


def test_exec_worker_is_armed_through_the_environment(tmp_path: Path) -> None:
    """A worker started as a fresh interpreter reads its plan from CRASH_HARNESS_CONTROL."""
    trace = tmp_path / "trace.jsonl"
    env = dict(os.environ)
    env[_boundary.CONTROL_ENV] = _boundary.control_env(
        trace_path=str(trace), worker="exec1", arms=[Arm("before_retry", 1)]
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import harness; harness.boundary('before_retry'); print('no')"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    assert "no" not in proc.stdout
    assert json.loads(trace.read_text())["event"] == "crash"


def test_import_harness_is_light() -> None:
    """Importing harness for boundary() must not pull in SQLAlchemy or requests."""
    code = (
        "import sys, harness; "
        "print(sorted(m for m in ('sqlalchemy', 'requests') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"


def test_arm_rejects_non_integer_hit() -> None:
    """A malformed plan is refused with the field named."""
    with pytest.raises(TypeError, match="hit"):
        Arm.from_json({"boundary": "x", "hit": "two"})
