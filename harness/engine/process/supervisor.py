"""Start worker processes, arm them, watch them die, and leave nothing behind.

Workers are forked from the harness (which has SQLAlchemy imported already), because a fresh
interpreter costs ~70x more than a fork here. Each child is the leader of its own process
group, so a Ctrl-C at the terminal reaches only the harness, which then kills every worker it
started; each child also asks the kernel to SIGKILL it if the harness itself dies
(``PR_SET_PDEATHSIG``), so not even a SIGKILLed harness leaves workers running.

A worker may be a process tree (pool children, a work-horse in its own session). Each worker
gets its own cgroup where the kernel allows it, else a keeper (``harness.engine.process._keeper``):
a child
subreaper forked first, the worker's parent, so a daemon that double-forks away from the
worker is still found by walking /proc down from the keeper (``harness.engine.process._tree``). A
kill
always takes the whole tree, and processes still alive when the worker's first process ends
are killed and counted as stragglers.

Deaths are classified, never guessed, and never on the worker's word alone: a worker killed by
SIGKILL "crashed as planned" only if every "crash" line of it in the trace matches what the
harness itself asked for: an arm it set on that worker (a crash arm covering that boundary and
hit, or a pause arm it then released with ``crash``), or a kill the harness made and recorded
(``Supervisor.kill``). A crash line naming a boundary or hit no arm asked for, or a kill reason
the harness never gave, makes the SIGKILL unplanned (an anomaly, with a note saying why). Any
other signal (SIGSEGV, SIGTERM, SIGABRT...) or a non-zero exit is a death, whatever the trace
says; anything else is reported with its stderr, and a worker that outlives its deadline has
its stacks dumped (faulthandler on SIGABRT) before it is killed.

Its parts, each a module of its own: ``_start`` (which way a worker is forked) and
``_child`` (what the fork does before the worker's code runs), ``_campaign_cgroup`` (the
campaign's cgroup and its guard), ``_events`` (the events pipe), ``_killing`` (kills,
dumps, reaps), ``_classify`` (how it ended), ``_running`` and ``_outcome`` (the records),
``_waiting`` and ``_tail`` (pidfd waits, the end of an output file). This module holds
what ties them: the live workers, and every wait that must also watch the case's lifelines.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from fake_providers._credentials import not_dumpable
from harness.engine.process import _child, _events, _killing, _leftovers, _start, _tree
from harness.engine.process._boundary import Arm
from harness.engine.process._campaign_cgroup import CGROUP_PREFIX, TREE_MODE_ENV, CampaignCgroup
from harness.engine.process._classify import classify
from harness.engine.process._events import Paused, WorkerEvent
from harness.engine.process._killing import DUMP_GRACE_S
from harness.engine.process._lifeline import PULSE_TICK_S, Lifelines
from harness.engine.process._outcome import OutcomeKind, WorkerOutcome
from harness.engine.process._running import RunningWorker
from harness.engine.process._tree import ProcessTree
from harness.engine.process._waiting import pidfd_of, wait_readable
from harness.engine.store import trace
from harness.errors import SupervisorError

__all__ = [
    "CGROUP_PREFIX",
    "DUMP_GRACE_S",
    "TREE_MODE_ENV",
    "OutcomeKind",
    "Paused",
    "RunningWorker",
    "Supervisor",
    "WorkerEvent",
    "WorkerOutcome",
    "pidfd_of",
    "wait_readable",
]


class Supervisor:
    """Owns every worker process of a campaign; use it as a context manager."""

    def __init__(self, *, workdir: Path) -> None:
        self.workdir = workdir
        not_dumpable()  # no worker may ptrace the harness or read its memory (a floor)
        self._live: dict[int, RunningWorker] = {}
        self._cgroup = CampaignCgroup()
        self._started = 0
        #: walled workers' inits let go and not yet reaped, with their cgroups
        self._ending: list[tuple[int, str]] = []
        #: how each worker reached its cgroup (``harness.engine.process._born``): benchmarks print
        #: it
        self.births: collections.Counter[str] = collections.Counter()
        #: processes the workers cannot do without (the provider): every wait for a worker
        #: also watches these, and raises ``LifelineCut`` the moment one ends
        self.lifelines = Lifelines()
        #: the process that made itself the orphans' reaper (``_leftovers``), and the
        #: children it had before: neither kind is a worker's leftover
        self._reaper: int | None = None
        self._before: set[int] = set()

    @property
    def tree_mode(self) -> str:
        """``cgroup`` when each worker gets its own cgroup, ``walk`` when /proc is walked."""
        return "cgroup" if self._cgroup.path() is not None else "walk"

    def _adopt_orphans(self) -> None:
        """Once per process that starts workers (a forked job is another): be the reaper of
        their orphans, so a daemon that left its cgroup is still the harness's child."""
        if self._reaper == os.getpid():
            return
        self._reaper = os.getpid()
        self._before = {pid for pid, _ in _leftovers.children()}
        _leftovers.become_subreaper()

    def known_pids(self) -> set[int]:
        """Every process this supervisor made or was given on purpose (live workers, their
        keepers, the guard, the providers it watches, children it had before): none of them
        is a leftover."""
        known = set(self._live) | self._before | self.lifelines.pids
        known |= {pid for pid, _ in self._ending}  # walled workers' inits, let go
        known |= {w.keeper.pid for w in self._live.values() if w.keeper is not None}
        if self._cgroup.guard is not None:
            known.add(self._cgroup.guard.pid)
        return known

    def escaped(self, held: str) -> dict[int, str]:
        """Processes handed to the harness as orphans that are in no live worker's tree:
        they left their worker's cgroup (or it had none). pid -> ``held``."""
        known = self.known_pids()
        found = _leftovers.adopted(known, ())
        if found:  # only then is every live tree walked
            inside: set[int] = set()
            for worker in self._live.values():
                if worker.tree is not None:
                    inside |= worker.tree.members()
            found -= inside
        return dict.fromkeys(found, held)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
        self.lifelines.close()

    @property
    def live_pids(self) -> list[int]:
        return list(self._live)

    @property
    def live_workers(self) -> list[RunningWorker]:
        """Every worker started and not yet reaped, in the order they were started."""
        return list(self._live.values())

    def _poll(self, fds: list[int], timeout_s: float | None) -> list[int]:
        """``wait_readable`` on ``fds`` and on every lifeline: ``LifelineCut`` if one ended,
        or if a lifeline's pulse (a provider's heartbeat) says it stopped answering, looked
        at before the wait and every ``PULSE_TICK_S`` of it."""
        if not self.lifelines.pulsing:
            ready = wait_readable([*fds, *self.lifelines.fds], timeout_s)
            self.lifelines.check(ready)
            return ready
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self.lifelines.feel()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            tick = PULSE_TICK_S if left is None else min(left, PULSE_TICK_S)
            ready = wait_readable([*fds, *self.lifelines.fds], tick)
            self.lifelines.check(ready)
            if ready or (left is not None and left <= tick):
                return ready

    def ends_within(self, worker: RunningWorker, seconds: float) -> bool:
        """Whether the worker's first process ends within ``seconds`` (its pidfd turns
        ready); ``LifelineCut`` as soon as a lifeline ends instead."""
        fd = pidfd_of(worker.pid)
        try:
            return fd in self._poll([fd], seconds)
        finally:
            os.close(fd)

    def pause(self, seconds: float) -> None:
        """Let ``seconds`` pass (between settle probes), ending early only by
        ``LifelineCut``: a lost provider is never slept through."""
        self._poll([], max(0.0, seconds))

    def start(
        self,
        name: str,
        target: Callable[[], None],
        *,
        trace_path: Path,
        arms: list[Arm] | None = None,
        logdir: Path | None = None,
        hooks: bool = False,
    ) -> RunningWorker:
        """Fork a worker that runs ``target`` with ``arms`` set, its output in the work dir;
        with ``hooks``, every send and commit of its process tree is a crash point too
        (``harness.engine.process._hooks``)."""
        arms = list(arms or [])
        logdir = logdir or self.workdir
        self._adopt_orphans()
        parent = os.getpid()
        cgroup = self._worker_cgroup(name)
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        walled = _start.ready_to_fork()
        spec = _child.WorkerSpec(
            target=target,
            name=name,
            arms=arms,
            trace_path=trace_path,
            stdout_path=logdir / f"{name}.stdout",
            stderr_path=logdir / f"{name}.stderr",
            events_fd=events_w,
            control_fd=control_r,
            counter_dir=logdir / f"{name}.hits",
            hooks=hooks,
        )
        run_worker = self._worker_side(spec, cgroup, harness_ends=(events_r, control_w))
        # read before the fork: on a busy machine the child can run and trace its first
        # hits before this process is scheduled again, and a spawn after its own hits
        # would reorder the worker's lane between two runs of one seed
        born = time.time()
        try:
            forked = _start.fork_worker(
                run_worker, cgroup=cgroup, walled=walled, workdir=self.workdir, logdir=logdir
            )
        except OSError as exc:
            for fd in (events_r, events_w, control_r, control_w):
                os.close(fd)
            raise SupervisorError(f"cannot fork worker {name}: {exc}") from exc
        if forked.pid == 0:  # pragma: no cover - runs in the child, which never returns
            run_worker(parent, None, born_inside=forked.born_inside)
        if forked.birth is not None:
            self.births[forked.birth] += 1
        os.close(events_w)
        os.close(control_r)
        return self._enlist(
            spec, forked, cgroup, born=born, events_fd=events_r, control_fd=control_w
        )

    def _worker_cgroup(self, name: str) -> str | None:
        """A new cgroup for the next worker under the campaign's (None in walk mode); the
        walled inits let go since the last start are reaped first."""
        self._started += 1
        self._reap_ended(block=False)
        cgroups = self._cgroup.path()
        return None if cgroups is None else _tree.make_cgroup(cgroups, f"{name}-{self._started}")

    def _worker_side(
        self, spec: _child.WorkerSpec, cgroup: str | None, *, harness_ends: tuple[int, int]
    ) -> _start.RunWorker:
        """What the forked process runs: let go of every pipe and pidfd that is the
        harness's (``harness_ends``: this worker's, then the other workers'), then become
        the worker (``_child.run``)."""

        def run_worker(  # pragma: no cover
            parent: int, keeper: int | None, *, born_inside: bool = False, walled: bool = False
        ) -> NoReturn:
            for fd in harness_ends:
                os.close(fd)
            for other in self._live.values():
                other.close_pipes()
            # the provider's pidfd and heartbeat are the harness's, not the worker's
            self.lifelines.close(in_child=True)
            _child.run(
                spec,
                parent=parent,
                # behind the wall the worker finds its own tree from its init (PID 1), and
                # its cgroup's files are read-only to it
                cgroup=None if walled else cgroup,
                keeper=keeper,
                born_inside=born_inside or walled,
            )

        return run_worker

    def _enlist(
        self,
        spec: _child.WorkerSpec,
        forked: _start.Forked,
        cgroup: str | None,
        *,
        born: float,
        events_fd: int,
        control_fd: int,
    ) -> RunningWorker:
        """The harness's side of a forked worker: its group, its record among the live
        workers, its spawn line in the trace."""
        pid, keeper = forked.pid, forked.keeper
        # Both sides set the group, so a signal sent right after fork cannot miss it. Only the
        # child joins its cgroup (two joins of one pid contend in the kernel, ~8 ms), before
        # it runs anything that could fork: until then, a kill by group reaches all of it.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        worker = RunningWorker(
            spec.name,
            pid,
            born,
            spec.stderr_path,
            spec.arms,
            events_fd=events_fd,
            control_fd=control_fd,
            tree=ProcessTree(pid, cgroup, None if keeper is None else keeper.pid),
            keeper=keeper,
            ns_pid=forked.ns_pid,
        )
        self._live[pid] = worker
        trace.append(
            spec.trace_path,
            event="spawn",
            worker=spec.name,
            pid=pid,
            at=born,
            arms=[a.to_json() for a in spec.arms],
        )
        return worker

    def wait(self, worker: RunningWorker, *, timeout_s: float, trace_path: Path) -> WorkerOutcome:
        """Block until the worker ends (or its deadline passes) and say how it ended."""
        pidfd = pidfd_of(worker.pid)
        try:
            ready = self._poll([pidfd], timeout_s)
            stack_dump: str | None = None
            if not ready:
                stack_dump = _killing.dump_and_kill(worker, pidfd)
            status = _killing.reap(worker)
            # read once, and only when a crash line can matter: a death by signal
            events = trace.read(trace_path) if os.WIFSIGNALED(status) else []
            if worker.tree is not None and (
                worker.tree.cgroup is None or worker.ns_pid is not None
            ):
                _killing.await_killers(worker, events)
            left = self._end_tree(worker)
            _killing.let_go(worker)
            self._live.pop(worker.pid, None)  # reaped; on an interrupt kill_all still owns it
            worker.ended = True
            worker.close_pipes()
        finally:
            os.close(pidfd)
        ended = time.time()
        outcome = classify(worker, status, events, ended, stack_dump)
        outcome.stragglers = len(left)
        outcome.left = left
        outcome.ns_pid = worker.ns_pid
        trace.append(
            trace_path,
            event="exit",
            worker=worker.name,
            pid=worker.pid,
            outcome=outcome.kind.value,
            signal=outcome.signal,
            exit_code=outcome.exit_code,
        )
        return outcome

    def wait_paused(self, worker: RunningWorker, *, timeout_s: float) -> Paused | None:
        """Block until the worker reports it is paused at a boundary; None if it ended first.

        Raises ``SupervisorError`` if neither happens within ``timeout_s``. A watchdog's
        ``overdue_flagged`` on the way is passed over: the worker is still working toward the
        boundary (a held reply keeps its next delivery waiting), and the flag is in the trace
        for the liveness checker.
        """
        return _events.wait_paused(worker, self._poll, timeout_s=timeout_s)

    def wait_event(
        self, worker: RunningWorker, *, timeout_s: float, quiet_ok: bool = False
    ) -> WorkerEvent | None:
        """Next line from the worker's events pipe; None if the worker ended first.

        Past ``timeout_s`` it raises ``SupervisorError``, or returns None if ``quiet_ok``.
        """
        return _events.wait_event(worker, self._poll, timeout_s=timeout_s, quiet_ok=quiet_ok)

    def next_event(
        self, workers: list[RunningWorker], *, timeout_s: float
    ) -> tuple[RunningWorker, WorkerEvent | None] | None:
        """The first line any of ``workers`` writes, as (worker, event), or (worker, None) for
        the first to end; None if nothing happens within ``timeout_s``.

        Several workers racing must be watched together: one may wait on another (a rival's
        lease), and a harness that listens to one at a time waits with it."""
        return _events.next_event(workers, self._poll, timeout_s=timeout_s)

    def kill(
        self,
        worker: RunningWorker,
        *,
        trace_path: Path,
        reason: str,
        boundary: str | None = None,
        hit: int | None = None,
        **detail: Any,
    ) -> None:
        """SIGKILL a whole worker on purpose (recorded first, in the trace and on the worker,
        so it counts as a planned crash). ``boundary``/``hit`` name the point it died at when
        the harness found it from outside (a far-side point, ``accepted.NAME``): the crash
        line then has the shape of a boundary crash. Safe to call from another thread while
        ``wait`` waits for the worker."""
        worker.harness_kills.append(reason)
        trace.append(
            trace_path,
            event="crash",
            worker=worker.name,
            pid=worker.pid,
            boundary=boundary,
            hit=hit,
            reason=reason,
            **detail,
        )
        _killing.kill_tree(worker)

    def _end_tree(self, worker: RunningWorker) -> list[_leftovers.Leftover]:
        """After the worker's first process is reaped: kill what is left, drop its cgroup;
        each process killed is named (``_leftovers.Leftover``), one that escaped the tree
        (out of its cgroup, handed to the harness as an orphan) too."""
        if worker.tree is None:
            return []
        out, ending = _killing.kill_the_rest(worker, worker.tree)
        if ending is not None:
            self._ending.append(ending)
        out += _leftovers.collect(
            self.escaped(f"left worker {worker.name}'s process tree (its cgroup) and outlived it")
        )
        _leftovers.reap_adopted(self.known_pids())
        return out

    def stop(
        self,
        worker: RunningWorker,
        *,
        sig: signal.Signals,
        grace_s: float,
        trace_path: Path,
        reason: str,
        then: Callable[[], None] | None = None,
    ) -> WorkerOutcome:
        """Stop a daemon worker as its library documents: ``sig`` to its first process (a
        warm shutdown lets it finish or hand back the task at hand), SIGKILL to its whole
        tree if it has not ended ``grace_s`` later. Which of the two it took is recorded.
        ``then``: run right after the signal is sent (a deploy lets a worker held at a
        boundary go on, to meet its signal where it was)."""
        sent = time.monotonic()
        pidfd = pidfd_of(worker.pid)
        try:
            if wait_readable([pidfd], 0):  # it ended on its own first: say how, not "stopped"
                return self.wait(worker, timeout_s=DUMP_GRACE_S, trace_path=trace_path)
            trace.append(
                trace_path,
                event="stop",
                worker=worker.name,
                pid=worker.pid,
                signal=sig.name,
                reason=reason,
            )
            worker.stopped_by = sig.name
            # a zombie still takes a signal: no race with its end (a walled worker whose
            # init was killed with its cgroup may be gone outright: the wait says how)
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, sig)
            if then is not None:
                then()
            if not wait_readable([pidfd], grace_s):
                worker.stopped_by = (
                    f"{sig.name}, then SIGABRT (its stacks) and SIGKILL after {grace_s:g}s"
                )
                trace.append(
                    trace_path,
                    event="stop_forced",
                    worker=worker.name,
                    pid=worker.pid,
                    grace_s=grace_s,
                )
                # a worker that ignores its stop signal is stuck somewhere: say where
                worker.stop_dump = _killing.dump_and_kill(worker, pidfd)
        finally:
            os.close(pidfd)
        outcome = self.wait(worker, timeout_s=DUMP_GRACE_S + grace_s, trace_path=trace_path)
        if outcome.kind is OutcomeKind.STOPPED and outcome.note is None:
            took = time.monotonic() - sent
            outcome.note = f"stopped by {worker.stopped_by} ({reason}; ended {took:.2f}s after)"
        return outcome

    def release(self, worker: RunningWorker, verb: str = "continue") -> None:
        """Let a paused worker go on (``continue``), die there (``crash``) or ``raise``."""
        assert worker.control_fd is not None, "worker has no control pipe"
        if verb == "crash":
            worker.crash_released = True
        with contextlib.suppress(BrokenPipeError):
            os.write(worker.control_fd, f"{verb}\n".encode())

    def send_signal(self, worker: RunningWorker, sig: signal.Signals) -> None:
        """Signal every process of the worker (SIGSTOP and SIGCONT for pauses)."""
        if worker.tree is not None:
            worker.tree.signal(sig)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, sig)

    def _reap_ended(self, *, block: bool) -> None:
        """Reap the inits of walled workers that were let go (waiting for each with
        ``block``), and remove their cgroups."""
        self._ending = _killing.reap_inits(self._ending, block=block)

    def kill_all(self) -> None:
        """SIGKILL every process group this supervisor started and reap it."""
        self.kill_live()
        self._reap_ended(block=True)
        self._cgroup.remove()
        if self._reaper == os.getpid():
            _leftovers.become_subreaper(on=False)
            self._reaper = None

    def kill_live(self) -> None:
        """SIGKILL every worker still running (a case the harness must give up) and reap it;
        the supervisor can start workers again after."""
        for pid in list(self._live):
            worker = self._live.get(pid)
            if worker is not None:
                _killing.kill_tree(worker)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                if worker is not None:
                    _killing.reap(worker)
                else:
                    os.waitpid(pid, 0)
            worker = self._live.pop(pid, None)
            if worker is not None:
                self._end_tree(worker)
                _killing.let_go(worker)
                worker.close_pipes()
