"""The supervisor classifies every way a worker can end, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import boundary
from harness.engine.process import _boundary
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import OutcomeKind, Supervisor, WorkerOutcome
from harness.engine.store import trace as trace_store


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


def _run(tmp_path: Path, target: Callable[[], None], arms: list[Arm]) -> WorkerOutcome:
    tmp_path.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", target, trace_path=trace, arms=arms)
        return sup.wait(w, timeout_s=30, trace_path=trace)


def _forge_crash_line(boundary_name: str, hit: int) -> None:
    """Write a "crash" line exactly as the worker's tracer writes one, without reaching any
    boundary: what a worker that lies (or a stray line) leaves in the trace."""
    tracer = _boundary._tracer
    assert tracer is not None
    tracer._record("crash", boundary_name, hit)


def _dies_by(sig: signal.Signals) -> Callable[[], None]:
    def target() -> None:
        _forge_crash_line("a", 1)  # matches the arm exactly: only the signal tells it apart
        os.kill(os.getpid(), sig)
        time.sleep(30)  # pragma: no cover - reached only if the signal were handled

    return target


@pytest.mark.parametrize(
    "sig", [signal.SIGSEGV, signal.SIGTERM, signal.SIGABRT], ids=lambda s: s.name
)
def test_a_death_by_another_signal_is_never_a_planned_crash(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGSEGV, SIGTERM or SIGABRT is a death, even with a crash line in the trace that matches
    the worker's arm: only SIGKILL ends a planned crash."""
    out = _run(tmp_path, _dies_by(sig), [Arm("a", 1)])
    assert out.kind is OutcomeKind.DIED, out
    assert out.signal == sig.name
    assert (out.boundary, out.hit) == (None, None)


def test_a_non_zero_exit_is_a_death_not_a_completion(tmp_path: Path) -> None:
    """A worker that exits 3 died on its own: an anomaly, with its exit code."""
    out = _run(tmp_path, lambda: os._exit(3), [])
    assert out.kind is OutcomeKind.DIED, out
    assert out.exit_code == 3
    assert out.outcome_is_anomaly


def _forges_and_kills_itself(boundary_name: str, hit: int) -> Callable[[], None]:
    def target() -> None:
        _forge_crash_line(boundary_name, hit)
        os.kill(os.getpid(), signal.SIGKILL)

    return target


@pytest.mark.parametrize(
    ("line", "why"),
    [(("b", 1), "another boundary"), (("a", 2), "another hit of the armed boundary")],
)
def test_a_crash_line_no_arm_asked_for_is_an_unplanned_kill(
    tmp_path: Path, line: tuple[str, int], why: str
) -> None:
    """A SIGKILL whose crash line names a boundary or hit that no arm of this worker covers is
    killed_unplanned (an anomaly), with a note naming the line and the arms; the same death
    with a line the arm does cover is the planned crash."""
    out = _run(tmp_path, _forges_and_kills_itself(*line), [Arm("a", 1)])
    assert out.kind is OutcomeKind.KILLED_UNPLANNED, (why, out)
    assert out.outcome_is_anomaly
    assert out.note is not None
    assert f"{line[0]}#{line[1]}" in out.note
    assert "crash@a#1" in out.note
    assert out.to_json()["note"] == out.note
    planned = _run(tmp_path / "ok", _forges_and_kills_itself("a", 1), [Arm("a", 1)])
    assert planned.kind is OutcomeKind.CRASHED_AS_PLANNED, planned


def _claims_a_harness_kill() -> None:
    tracer = _boundary._tracer
    assert tracer is not None
    trace_store.append(
        Path(tracer.trace_path),
        event="crash",
        worker=tracer.worker,
        pid=os.getpid(),
        reason="overdue work",
    )
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_harness_kill_counts_only_if_the_harness_made_it(tmp_path: Path) -> None:
    """``Supervisor.kill`` is a planned crash (the harness wrote the line and remembers the
    reason); the same line written by the worker before it killed itself is not."""
    forged = _run(tmp_path, _claims_a_harness_kill, [])
    assert forged.kind is OutcomeKind.KILLED_UNPLANNED, forged
    assert forged.note is not None
    assert "overdue work" in forged.note
    trace = tmp_path / "kill.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w2", _hangs_in_a_named_function, trace_path=trace)
        sup.kill(w, trace_path=trace, reason="overdue work")
        killed = sup.wait(w, timeout_s=30, trace_path=trace)
    assert killed.kind is OutcomeKind.CRASHED_AS_PLANNED, killed
    assert killed.note is None


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


def test_a_spawn_is_traced_before_the_hits_of_a_child_that_ran_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy machine the child can run, and trace its first hits, before the harness is
    scheduled again after the fork: the spawn line still comes first on the worker's lane
    (it is stamped with when the fork began), so two runs of one seed order the lane alike.
    The harness here waits, after its fork, until the child has traced its hit."""
    from harness.engine.process import _start

    traced_r, traced_w = os.pipe()
    real_fork = _start.fork_worker

    def late_parent(*args: object, **kwargs: object) -> _start.Forked:
        forked = real_fork(*args, **kwargs)  # type: ignore[arg-type]
        if forked.pid != 0:
            os.close(traced_w)
            assert os.read(traced_r, 1) == b"x", "the child ended before it traced its hit"
        return forked

    def hits_then_says_so() -> None:
        boundary("a")
        os.write(traced_w, b"x")

    monkeypatch.setattr(_start, "fork_worker", late_parent)
    trace = tmp_path / "trace.jsonl"
    try:
        with Supervisor(workdir=tmp_path) as sup:
            w = sup.start("w1", hits_then_says_so, trace_path=trace)
            out = sup.wait(w, timeout_s=30, trace_path=trace)
    finally:
        os.close(traced_r)
    assert out.kind is OutcomeKind.COMPLETED, out
    lines = [e for e in trace_store.read(trace) if e.worker == "w1"]
    kinds = [e.event for e in sorted(lines, key=lambda e: e.t)]
    assert kinds[:2] == ["spawn", "hit"], kinds
