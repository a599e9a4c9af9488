"""The supervisor classifies every way a worker can end, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from harness import boundary
from harness._boundary import Arm
from harness.supervisor import OutcomeKind, Supervisor


def _completes() -> None:
    boundary("a")


def _crashes_at_a() -> None:
    boundary("a")
    raise AssertionError("unreachable: boundary a is armed")


def _raises() -> None:
    raise RuntimeError("boom from the worker")


def _kills_itself() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _hangs_in_a_named_function() -> None:
    def stuck_waiting_for_godot() -> None:
        signal.pause()

    stuck_waiting_for_godot()


@pytest.mark.parametrize(
    ("target", "arms", "kind"),
    [
        (_completes, [], OutcomeKind.COMPLETED),
        (_crashes_at_a, [Arm("a", 1)], OutcomeKind.CRASHED_AS_PLANNED),
        (_raises, [], OutcomeKind.DIED),
        (_kills_itself, [], OutcomeKind.KILLED_UNPLANNED),
    ],
)
def test_outcome_is_classified(
    tmp_path: Path, target: object, arms: list[Arm], kind: OutcomeKind
) -> None:
    """Each ending gets its own kind; only a traced SIGKILL counts as the planned crash."""
    trace = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", target, trace_path=trace, arms=arms)  # type: ignore[arg-type]
        out = sup.wait(w, timeout_s=30, trace_path=trace)
    assert out.kind is kind
    if kind is OutcomeKind.CRASHED_AS_PLANNED:
        assert (out.boundary, out.hit, out.signal) == ("a", 1, "SIGKILL")
    if kind is OutcomeKind.DIED:
        assert "RuntimeError: boom from the worker" in out.stderr_tail
        assert out.exit_code == 70


def test_hung_worker_gets_a_stack_dump_and_is_killed(tmp_path: Path) -> None:
    """A worker past its deadline is reported hung with the function it is stuck in."""
    trace = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", _hangs_in_a_named_function, trace_path=trace)
        out = sup.wait(w, timeout_s=0.5, trace_path=trace)
    assert out.kind is OutcomeKind.HUNG
    assert out.stack_dump is not None
    assert "stuck_waiting_for_godot" in out.stack_dump
    with pytest.raises(ProcessLookupError):
        os.kill(w.pid, 0)


def test_kill_all_leaves_nothing_running(tmp_path: Path) -> None:
    """Leaving the supervisor kills and reaps workers that are still running."""
    trace = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        pids = [
            sup.start(f"w{i}", _hangs_in_a_named_function, trace_path=trace).pid for i in range(3)
        ]
        assert sorted(sup.live_pids) == sorted(pids)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_worker_dies_with_a_killed_harness(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: if the harness itself is SIGKILLed, its workers die too."""
    read_fd, write_fd = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - the "harness" process
        os.close(read_fd)
        sup = Supervisor(workdir=tmp_path)
        w = sup.start("w1", _hangs_in_a_named_function, trace_path=tmp_path / "t.jsonl")
        os.write(write_fd, f"{w.pid}\n".encode())
        signal.pause()
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        worker_pid = int(pipe.readline())
    os.kill(middle, signal.SIGKILL)
    os.waitpid(middle, 0)
    # The worker is re-parented to init and killed by the kernel; wait on its pidfd.
    deadline = time.monotonic() + 10
    try:
        fd = os.pidfd_open(worker_pid)
    except ProcessLookupError:
        return
    import select

    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    os.close(fd)
    assert ready, f"worker {worker_pid} outlived its harness"
