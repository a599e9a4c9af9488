"""Ending a worker's processes: killing its tree, dumping a hung one's stacks, reaping.

Each way a worker's processes end (a kill, a hang past its deadline, the first process's
end leaving others behind, a walled init let go) has its own wait with a bound on it, so
that no worker, and no copy of a pipe it kept, can make the harness wait for ever. Apart
from the supervisor so that those waits and their bounds read in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal

from harness.engine.process import _leftovers, _tree, _wall
from harness.engine.process._child import HARNESS_PIPE_ENDS
from harness.engine.process._running import RunningWorker
from harness.engine.process._tail import file_size, read_tail
from harness.engine.process._tree import ProcessTree
from harness.engine.process._waiting import wait_readable
from harness.engine.store import trace

#: how long a hung worker gets to write its stack dump after SIGABRT before SIGKILL
DUMP_GRACE_S = 5.0
#: how long a child orphaned by a ``parent``-scope crash may go on before it is killed
ORPHAN_GRACE_S = 10.0
#: how much of a hung worker's stack dump (what it wrote after SIGABRT) a report carries
STACK_DUMP_BYTES = 64 * 1024


def kill_tree(worker: RunningWorker) -> None:
    """SIGKILL every process of the worker, and its process group."""
    if worker.tree is not None:
        worker.tree.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.pid, signal.SIGKILL)


def dump_and_kill(worker: RunningWorker, pidfd: int) -> str:
    """A hung worker: SIGABRT (faulthandler writes every thread's stack), SIGKILL to its
    tree if it has not ended ``DUMP_GRACE_S`` later; what it wrote after the SIGABRT."""
    before = file_size(worker.stderr_path)
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker.pid, signal.SIGABRT)  # faulthandler writes every thread's stack
    ready = wait_readable([pidfd], DUMP_GRACE_S)
    if not ready:
        kill_tree(worker)
    return read_tail(worker.stderr_path, STACK_DUMP_BYTES, start=before)


def reap(worker: RunningWorker) -> int:
    """Wait for the worker's first process to end; its wait status."""
    if worker.keeper is not None:
        return worker.keeper.wait_status()
    return os.waitpid(worker.pid, 0)[1]


def let_go(worker: RunningWorker) -> None:
    """Done with a worker: its keeper (walk mode) kills what is left under it and exits."""
    if worker.keeper is not None:
        HARNESS_PIPE_ENDS.difference_update((worker.keeper.hold_fd, worker.keeper.report_fd))
        worker.keeper.release()


def kill_the_rest(
    worker: RunningWorker, tree: ProcessTree
) -> tuple[list[_leftovers.Leftover], tuple[int, str] | None]:
    """After the worker's first process is reaped: kill what is left of its ``tree``, drop
    its cgroup, and name each process killed (``_leftovers.Leftover``). Also, behind the
    wall, the init let go and its cgroup, to reap later (``reap_inits``); else None.

    A worker whose first process was killed under it (crash scope ``parent``) leaves a
    child at work: its orphans get ``ORPHAN_GRACE_S`` to finish and exit on their own,
    as they would on a machine where only the parent died."""
    if any(a.scope == "parent" for a in worker.arms) and (tree.cgroup or tree.keeper):
        tree.wait_empty(ORPHAN_GRACE_S)
    remaining = tree.members() - {worker.pid}
    left = {pid for pid in remaining if not _tree.dying(pid)}
    named = {pid: _leftovers.command_of(pid) for pid in left}
    if remaining:
        tree.kill()
    ending: tuple[int, str] | None = None
    if tree.cgroup is not None:
        if worker.keeper is not None and worker.ns_pid is not None:
            # The wall's init: let go, it exits and the kernel ends its namespaces (every
            # process left in it is killed already). Tearing the namespaces down costs
            # ~9 ms (the mount namespace's unmounts wait for RCU), so the harness does
            # not wait: the init is reaped, and its cgroup removed, at the next start
            # (``known_pids`` keeps it from being taken for a leftover meanwhile).
            HARNESS_PIPE_ENDS.difference_update((worker.keeper.hold_fd, worker.keeper.report_fd))
            worker.keeper.release(wait=False)
            ending = (worker.keeper.pid, tree.cgroup)
        else:
            tree.wait_empty(DUMP_GRACE_S)
            _tree.remove_cgroup(tree.cgroup)
    killed = [
        _leftovers.Leftover(
            pid,
            named[pid],
            f"of worker {worker.name} was still running after its first process ended",
            _tree.dying(pid),
        )
        for pid in sorted(left)
    ]
    return killed, ending


def reap_inits(ending: list[tuple[int, str]], *, block: bool) -> list[tuple[int, str]]:
    """Reap the inits of walled workers that were let go, (pid, cgroup) each (waiting for
    each with ``block``), and remove their cgroups; those not ended yet."""
    still: list[tuple[int, str]] = []
    for pid, cgroup in ending:
        if block:
            await_init(pid)
        try:
            done = os.waitpid(pid, 0 if block else os.WNOHANG)[0] == pid
        except ChildProcessError:
            done = True
        if not done:
            still.append((pid, cgroup))
            continue
        tree = ProcessTree(pid, cgroup)
        tree.wait_empty(DUMP_GRACE_S)
        _tree.remove_cgroup(cgroup)
    return still


def await_init(pid: int) -> None:
    """Give a let-go init ``DUMP_GRACE_S`` to exit, then SIGKILL it (the kernel then ends
    its namespace): a copy of its hold pipe that some other process still keeps open must
    never make the harness wait for ever at its end, on Ctrl-C least of all."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # already reaped, or not ours
    try:
        if not wait_readable([fd], DUMP_GRACE_S):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)


def await_killers(worker: RunningWorker, events: list[trace.TraceEvent]) -> None:
    """Walk mode, or a walled worker: wait for the process that killed the worker from
    inside to be gone too.

    A worker-scope crash in a member (a work-horse) kills every other member and waits for
    them, then the root, then itself; the root's death is what ``wait`` sees, and a walk from
    a reaped root finds nothing. Behind the wall the cgroup file system is read-only, so the
    killer cannot use ``cgroup.kill`` and kills one by one as well: until its own last kill
    it is a live member, not a process that outlived its worker. The killer's own pid is on
    its crash line, so wait on that. A ``parent``-scope killer is not waited for here: it
    lives on as an orphan at work, and ``kill_the_rest`` gives it its grace."""
    if not any(a.scope == "worker" for a in worker.arms):
        return
    own = worker.pid if worker.ns_pid is None else worker.ns_pid  # as its trace names it
    killers = {
        ev.pid
        for ev in events
        if ev.event == "crash" and ev.worker == worker.name and ev.pid != own
    }
    if worker.ns_pid is not None and worker.tree is not None:  # the trace's pids are inner
        killers = _wall.outer_pids(worker.tree.members(), killers)
    handles = []
    for pid in killers:
        with contextlib.suppress(OSError):  # already gone (and reaped): nothing to wait for
            handles.append(os.pidfd_open(pid))
    try:
        for fd in handles:
            wait_readable([fd], DUMP_GRACE_S)
    finally:
        for fd in handles:
            os.close(fd)
