"""Workers that are process trees: a crash kills the whole worker or only the process at the
boundary, hits are counted across the tree, and nothing outlives a worker.

The worker here behaves like an RQ worker: a long-lived pool child, and each job run in a
forked work-horse that moves itself into a new session (so neither its process group nor its
session is the worker's). Every test runs in both ways of finding a tree: the worker's own
cgroup, and the walk over /proc. Both run without the wall (``CRASH_HARNESS_ISOLATION=off``):
these tests check the pids the worker's processes write down from the harness's side, and
behind the wall those are its own PID namespace's (tests/test_hostile_wall.py holds the wall
to the same: nothing of a walled worker outlives it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from harness import boundary
from harness.engine.process import _tree
from harness.engine.process._boundary import Arm
from harness.engine.process._wall import ISOLATION_ENV
from harness.engine.process.supervisor import TREE_MODE_ENV, OutcomeKind, Supervisor
from harness.engine.store import trace


def _alive(pid: int) -> bool:
    """Whether ``pid`` can still run: a zombie, an exiting process or one with SIGKILL pending
    cannot (the kernel tears it down without running another instruction of it)."""
    return not _tree.dying(pid)


def _queue_worker(outdir: Path, jobs: int) -> None:
    pool = os.fork()
    if pool == 0:  # a pool child that lives as long as the worker, in its own session
        os.setsid()
        signal.pause()
        os._exit(0)
    (outdir / "pool.pid").write_text(str(pool))
    for j in range(jobs):
        horse = os.fork()
        if horse == 0:
            os.setsid()  # as RQ's work-horse does
            (outdir / f"horse{j}.pid").write_text(str(os.getpid()))
            boundary("in_horse")
            (outdir / f"horse{j}.done").write_text("")
            os._exit(0)
        _, status = os.waitpid(horse, 0)
        (outdir / f"horse{j}.signal").write_text(
            str(os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0)
        )
    os.kill(pool, signal.SIGKILL)
    os.waitpid(pool, 0)


@pytest.fixture(params=["cgroup", "walk"])
def tree_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode = str(request.param)
    if mode == "cgroup" and _tree.cgroup2_base() is None:
        pytest.skip("this process may not create cgroups here")
    monkeypatch.setenv(TREE_MODE_ENV, mode)
    monkeypatch.setenv(ISOLATION_ENV, "off")
    return mode


def _pids(outdir: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(outdir.glob("*.pid"))]


def test_worker_scope_kills_every_process_of_the_worker(tmp_path: Path, tree_mode: str) -> None:
    """A crash in a work-horse in its own session takes the main process and the pool child."""
    out = tmp_path / "out"
    out.mkdir()
    t = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        assert sup.tree_mode == tree_mode
        w = sup.start("w1", partial(_queue_worker, out, 2), trace_path=t, arms=[Arm("in_horse")])
        outcome = sup.wait(w, timeout_s=30, trace_path=t)
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED
    assert (outcome.boundary, outcome.hit) == ("in_horse", 1)
    assert not (out / "horse0.signal").exists(), "the main process outlived the crash"
    assert not (out / "horse1.pid").exists()
    pids = _pids(out)
    assert len(pids) == 2  # the pool child and the first horse
    assert not [p for p in pids if _alive(p)]


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """Two busy processes for the test's length: the loaded runner a kill must survive."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _kill_rounds(tmp_path: Path, rounds: int) -> list[str]:
    left: list[str] = []
    for n in range(rounds):
        out = tmp_path / f"out{n}"
        out.mkdir()
        t = tmp_path / f"trace{n}.jsonl"
        with Supervisor(workdir=tmp_path) as sup:
            w = sup.start(
                f"w{n}", partial(_queue_worker, out, 2), trace_path=t, arms=[Arm("in_horse")]
            )
            outcome = sup.wait(w, timeout_s=30, trace_path=t)
            alive = [f.name for f in sorted(out.glob("*.pid")) if _alive(int(f.read_text()))]
        if outcome.kind is not OutcomeKind.CRASHED_AS_PLANNED or alive:
            left.append(f"round {n}: {outcome.kind} alive {alive}")
    return left


@pytest.mark.parametrize(
    "rounds", [pytest.param(20, id="20"), pytest.param(200, id="200", marks=pytest.mark.slow)]
)
def test_worker_scope_kill_leaves_nothing_under_load(
    tmp_path: Path, tree_mode: str, cpu_hog: None, rounds: int
) -> None:
    """When ``wait`` returns from a worker-scope crash, no process of the tree can run, on a
    machine kept busy (a pool child once outlived ``wait`` in walk mode on a loaded CI)."""
    assert _kill_rounds(tmp_path, rounds) == []


def test_process_scope_kills_only_the_process_at_the_boundary(
    tmp_path: Path, tree_mode: str
) -> None:
    """The worker sees its horse die by SIGKILL and goes on with the next job."""
    out = tmp_path / "out"
    out.mkdir()
    t = tmp_path / "trace.jsonl"
    arm = Arm("in_horse", scope="process")
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", partial(_queue_worker, out, 2), trace_path=t, arms=[arm])
        outcome = sup.wait(w, timeout_s=30, trace_path=t)
    assert outcome.kind is OutcomeKind.COMPLETED
    assert int((out / "horse0.signal").read_text()) == signal.SIGKILL
    assert not (out / "horse0.done").exists()
    assert (out / "horse1.done").exists()
    assert int((out / "horse1.signal").read_text()) == 0
    assert not [p for p in _pids(out) if _alive(p)]


def test_hits_are_counted_across_the_tree(tmp_path: Path, tree_mode: str) -> None:
    """The second horse's hit is hit 2 of the worker, so ``in_horse#2`` crashes that horse."""
    out = tmp_path / "out"
    out.mkdir()
    t = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start(
            "w1",
            partial(_queue_worker, out, 3),
            trace_path=t,
            arms=[Arm("in_horse", 2, scope="process")],
        )
        assert sup.wait(w, timeout_s=30, trace_path=t).kind is OutcomeKind.COMPLETED
    hits = [(e.event, e.hit, e.pid) for e in trace.read(t) if e.boundary == "in_horse"]
    assert [(ev, n) for ev, n, _ in hits] == [("hit", 1), ("crash", 2), ("hit", 3)]
    assert len({pid for _, _, pid in hits}) == 3
    assert [(out / f"horse{j}.done").exists() for j in range(3)] == [True, False, True]


def test_a_harness_kill_takes_the_whole_tree(tmp_path: Path, tree_mode: str) -> None:
    """Killing a worker paused inside a horse leaves neither the horse nor the pool child."""
    out = tmp_path / "out"
    out.mkdir()
    t = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start(
            "w1", partial(_queue_worker, out, 1), trace_path=t, arms=[Arm("in_horse", 1, "pause")]
        )
        paused = sup.wait_paused(w, timeout_s=30)
        assert paused is not None
        assert paused.boundary == "in_horse"
        pids = _pids(out)
        assert len(pids) == 2
        assert all(_alive(p) for p in pids)
        sup.kill(w, trace_path=t, reason="test")
        outcome = sup.wait(w, timeout_s=30, trace_path=t)
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED
    assert not [p for p in pids if _alive(p)]


def _leaves_a_daemon(outdir: Path) -> None:
    child = os.fork()
    if child == 0:
        os.setsid()
        signal.pause()
        os._exit(0)
    (outdir / "daemon.pid").write_text(str(child))


@pytest.mark.parametrize("wall", ["on", "off"])
def test_stragglers_are_killed_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wall: str
) -> None:
    """A worker that ends leaving a process behind: the harness kills it and says so (behind
    the wall too, where its init is no straggler)."""
    if _tree.cgroup2_base() is None:
        pytest.skip("only a cgroup finds a process whose parent is gone")
    monkeypatch.delenv(TREE_MODE_ENV, raising=False)
    monkeypatch.setenv(ISOLATION_ENV, wall)
    out = tmp_path / "out"
    out.mkdir()
    t = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", partial(_leaves_a_daemon, out), trace_path=t)
        outcome = sup.wait(w, timeout_s=30, trace_path=t)
        daemon = int((out / "daemon.pid").read_text())
        assert outcome.kind is OutcomeKind.COMPLETED
        assert outcome.stragglers == 1
        assert outcome.to_json()["stragglers"] == 1
        # killed: behind the wall its namespace is torn down while the harness goes on
        assert all(_tree.dying(p) for p in w.tree.members()), "a process outlived the worker"
        if wall == "off":  # behind the wall the pid it wrote down is its namespace's
            assert not _alive(daemon)
    assert not w.tree.members(), "a process of the worker outlived the supervisor"


def test_cgroups_of_a_dead_harness_are_swept(tmp_path: Path) -> None:
    """A SIGKILLed harness cannot clean up; the next one kills what its cgroups still hold."""
    base = _tree.cgroup2_base()
    if base is None:
        pytest.skip("this process may not create cgroups here")
    # a pid that is certainly not running: a reaped child's
    gone = os.fork()
    if gone == 0:
        os._exit(0)
    os.waitpid(gone, 0)
    parent = _tree.make_cgroup(base, f"crash-harness-test-{gone}")
    assert parent is not None
    child = _tree.make_cgroup(parent, "w1-1")
    assert child is not None
    orphan = os.fork()
    if orphan == 0:
        signal.pause()
        os._exit(0)
    try:
        assert _tree.join_cgroup(child, orphan)
        swept = _tree.sweep_stale(base, "crash-harness-test-")
        assert parent in swept
        _, status = os.waitpid(orphan, 0)
        assert os.WIFSIGNALED(status)
        assert os.WTERMSIG(status) == signal.SIGKILL
        _tree.sweep_stale(base, "crash-harness-test-")  # reaped now: the cgroup is empty
        assert not os.path.exists(parent)
    finally:
        if _alive(orphan):
            os.kill(orphan, signal.SIGKILL)
            os.waitpid(orphan, 0)


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


def _double_forks_a_daemon(outdir: Path) -> None:
    """A worker that daemonises a child the classic way (fork, setsid, fork, the middle one
    exits) and then ends: the grandchild's parent is gone before the worker's is."""
    ready_r, ready_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            me = os.getpid()
            (outdir / "daemon.pid").write_text(f"{me} {_start_time(me)}")
            os.write(ready_w, b"ready")
            while True:
                signal.pause()
        os._exit(0)
    os.close(ready_w)
    os.waitpid(middle, 0)
    assert os.read(ready_r, 5) == b"ready"  # the daemon lives, its pid written


def _kill_if_same(record: Path) -> None:
    """Teardown: SIGKILL the recorded process if it still is the one recorded (pid + start)."""
    if not record.exists():
        return
    pid, start = (int(x) for x in record.read_text().split())
    if _start_time(pid) == start:
        os.kill(pid, signal.SIGKILL)


def test_a_double_forked_daemon_is_a_straggler_in_walk_mode_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a cgroup, a daemon that double-forked away from its worker is re-parented to
    the worker's keeper (a child subreaper), so it is found, killed and counted."""
    monkeypatch.setenv(TREE_MODE_ENV, "walk")
    out = tmp_path / "out"
    out.mkdir()
    t = tmp_path / "trace.jsonl"
    try:
        with Supervisor(workdir=tmp_path) as sup:
            assert sup.tree_mode == "walk"
            w = sup.start("w1", partial(_double_forks_a_daemon, out), trace_path=t)
            outcome = sup.wait(w, timeout_s=60, trace_path=t)
        pid, start = (int(x) for x in (out / "daemon.pid").read_text().split())
        assert outcome.kind is OutcomeKind.COMPLETED
        assert outcome.stragglers == 1
        assert _start_time(pid) != start or not _alive(pid), "the daemon outlived its worker"
    finally:
        _kill_if_same(out / "daemon.pid")


def _forking_worker(outdir: Path, forks: int) -> None:
    """A main process that keeps forking (as RQ's main forks a work-horse per job) while its
    first child reaches a boundary armed to crash the whole worker."""
    ready_r, ready_w = os.pipe()
    horse = os.fork()
    if horse == 0:
        os.close(ready_w)
        os.read(ready_r, 1)  # the main is forking by now
        boundary("in_horse")
        os._exit(0)
    os.close(ready_r)
    for n in range(forks):
        child = os.fork()
        if child == 0:
            (outdir / f"child{n}.pid").write_text(str(os.getpid()))
            signal.pause()
            os._exit(0)
        if n == 3:
            os.write(ready_w, b"x")
    os.waitpid(horse, 0)


def test_worker_scope_kill_catches_a_fork_under_way(tmp_path: Path, tree_mode: str) -> None:
    """A process stopped in the middle of fork() finishes it before it stops: the kill walks
    the tree again only once every process it signalled is seen stopped, so a child forked
    while the kill went on is killed too (an RQ main's new work-horse once outlived it)."""
    left: list[str] = []
    for n in range(10):
        out = tmp_path / f"out{n}"
        out.mkdir()
        t = tmp_path / f"trace{n}.jsonl"
        try:
            with Supervisor(workdir=tmp_path) as sup:
                w = sup.start(
                    f"w{n}",
                    partial(_forking_worker, out, 400),
                    trace_path=t,
                    arms=[Arm("in_horse")],
                )
                outcome = sup.wait(w, timeout_s=30, trace_path=t)
                alive = [p for p in _written_pids(out) if _alive(p)]
                if (
                    outcome.kind is not OutcomeKind.CRASHED_AS_PLANNED
                    or alive
                    or outcome.stragglers
                ):
                    left.append(f"round {n}: {outcome.kind} {outcome.stragglers} alive {alive}")
        finally:
            for pid in _written_pids(out):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert left == []


def _written_pids(outdir: Path) -> list[int]:
    """The pids the children wrote (one killed mid-write left an empty file: it is counted
    by the outcome's stragglers, if it could still run, not here)."""
    return [int(t) for f in sorted(outdir.glob("*.pid")) if (t := f.read_text().strip())]
