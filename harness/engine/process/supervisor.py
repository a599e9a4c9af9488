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
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import faulthandler
import functools
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from fake_providers._client import forget_admin_tokens
from fake_providers._credentials import not_dumpable
from harness.engine.process import _born, _boundary, _keeper, _leftovers, _tree, _wall
from harness.engine.process._boundary import Arm
from harness.engine.process._lifeline import PULSE_TICK_S, Lifelines
from harness.engine.process._tree import ProcessTree
from harness.engine.store import _scratch, _secrets, trace
from harness.errors import SupervisorError

#: how long a hung worker gets to write its stack dump after SIGABRT before SIGKILL
DUMP_GRACE_S = 5.0
#: how long a child orphaned by a ``parent``-scope crash may go on before it is killed
ORPHAN_GRACE_S = 10.0
#: how much of a worker's stderr a report carries (its end, in bytes); the harness never
#: reads more of it than this, however much a worker prints: the whole file stays in the
#: work dir
STDERR_TAIL_BYTES = 4000
#: how much of a hung worker's stack dump (what it wrote after SIGABRT) a report carries
STACK_DUMP_BYTES = 64 * 1024

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4

#: set to ``walk`` to find worker trees by walking /proc even where cgroups are available
TREE_MODE_ENV = "CRASH_HARNESS_TREE"
#: a harness's cgroup is named this plus its pid (so a later harness can sweep stale ones)
CGROUP_PREFIX = "crash-harness-"


class OutcomeKind(StrEnum):
    """How one worker incarnation ended."""

    COMPLETED = "completed"
    CRASHED_AS_PLANNED = "crashed_as_planned"
    KILLED_UNPLANNED = "killed_unplanned"
    DIED = "died"
    HUNG = "hung"
    #: a daemon worker the harness stopped once the system had settled (or the settle
    #: deadline passed): by its documented stop signal, or by SIGKILL when it ignored that;
    #: also a worker killed because its case's provider died
    #: (``harness.engine.case._provider_watch``)
    STOPPED = "stopped"
    #: a worker that exited with a code its scenario calls normal after one of its processes
    #: was killed as planned (``[worker] exits_after_crash``): restarted, no anomaly
    EXITED_AFTER_CRASH = "exited_after_crash"


@dataclass
class WorkerOutcome:
    worker: str
    pid: int
    kind: OutcomeKind
    exit_code: int | None
    signal: str | None
    boundary: str | None
    hit: int | None
    started_at: float
    ended_at: float
    stderr_tail: str = ""
    stack_dump: str | None = None
    #: processes of the worker still alive when its first process ended (killed then)
    stragglers: int = 0
    #: each of them named: pid, command line, what tied it to the worker
    #: (``harness.engine.process._leftovers``), escaped ones (out of its cgroup) included
    left: list[_leftovers.Leftover] = field(default_factory=list)
    #: why the death was classified as it was, when that is not plain from the kind (an
    #: unplanned SIGKILL whose crash line matched no arm)
    note: str | None = None
    #: behind the wall (``harness.engine.process._wall``): the first process's pid in its own PID
    #: namespace, as its trace lines name it (None: ``pid`` is what they say)
    ns_pid: int | None = None

    @property
    def trace_pid(self) -> int:
        """The pid the worker's first process writes in its trace lines (behind the wall,
        its namespace's: a number that may be another process's on the host)."""
        return self.pid if self.ns_pid is None else self.ns_pid

    @property
    def ended_normally(self) -> bool:
        """It finished (a worker that ends when its work is done), or the harness stopped it
        (a daemon): either way, any armed hit it never reached is not coming."""
        return self.kind in (OutcomeKind.COMPLETED, OutcomeKind.STOPPED)

    @property
    def outcome_is_anomaly(self) -> bool:
        return self.kind in (OutcomeKind.DIED, OutcomeKind.KILLED_UNPLANNED, OutcomeKind.HUNG)

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "pid": self.pid,
            "outcome": self.kind.value,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "boundary": self.boundary,
            "hit": self.hit,
            "duration_s": round(self.ended_at - self.started_at, 4),
            "stderr_tail": self.stderr_tail,
            "stack_dump": self.stack_dump,
            "stragglers": self.stragglers,
            **({"left": [p.to_json() for p in self.left]} if self.left else {}),
            "note": self.note,
        }


@dataclass
class RunningWorker:
    name: str
    pid: int
    started_at: float
    stderr_path: Path
    arms: list[Arm] = field(default_factory=list)
    #: worker -> harness: "paused NAME HIT" lines (read end, in the harness)
    events_fd: int | None = None
    #: harness -> worker: "continue" / "crash" / "raise" (write end, in the harness)
    control_fd: int | None = None
    pending: bytes = b""
    ended: bool = False
    #: every process of this worker (its cgroup, or its descendants)
    tree: ProcessTree | None = None
    #: walk mode: the child subreaper that is this worker's parent (None with a cgroup)
    keeper: _keeper.Keeper | None = None
    #: the reasons of every ``Supervisor.kill`` of this worker (the harness's own record)
    harness_kills: list[str] = field(default_factory=list)
    #: True once the harness released a pause of this worker with ``crash``
    crash_released: bool = False
    #: how the harness stopped this (daemon) worker: "SIGTERM", or "SIGTERM then SIGKILL"
    stopped_by: str | None = None
    #: behind the wall: the first process's pid inside its PID namespace (its trace's pids
    #: are the namespace's); None outside
    ns_pid: int | None = None

    def close_pipes(self) -> None:
        for fd in (self.events_fd, self.control_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.events_fd = self.control_fd = None


@dataclass(frozen=True)
class Paused:
    """A worker holding at a boundary, waiting for ``Supervisor.release``."""

    worker: RunningWorker
    boundary: str
    hit: int


@dataclass(frozen=True)
class WorkerEvent:
    """A line a worker wrote on its events pipe: paused, hung, or overdue_flagged."""

    kind: str
    subject: str
    hit: int
    at: float


#: a process that outlives the harness by design: it waits for the harness's end of a pipe to
#: close (however the harness died, SIGKILL included) and then kills the campaign's cgroup.
#: Workers die with the harness by their death signal, but a worker's own children (a pool,
#: a work-horse) have none; without this they lived on until the next run swept the cgroup.
_GUARD = """
import os, sys, time
while os.read(0, 4096):
    pass
top = sys.argv[1]
try:
    with open(os.path.join(top, "cgroup.kill"), "w") as f:
        f.write("1")
except OSError:
    sys.exit(0)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    dirs = [d for d, _, _ in os.walk(top)]
    for d in reversed(dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass
    if not os.path.isdir(top):
        break
    time.sleep(0.05)
"""
#: the harness's ends of its guards' and keepers' pipes, closed in every forked worker (which
#: must not keep a guard or a keeper waiting)
_GUARD_FDS: set[int] = set()


def _start_guard(cgroup: str) -> subprocess.Popen[bytes] | None:
    try:
        # -I -S: no site, no user paths, no .pth files to run: the guard needs only os, sys
        # and time, and starts in a third of the time. A new interpreter, not a fork: it
        # outlives the harness, and a fork would keep the harness's memory for that long.
        guard = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD, cgroup],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the harness's group leaves it to its work
            env=_secrets.without_provider_secrets(os.environ),  # workers can read its environ
        )
    except OSError:
        return None
    assert guard.stdin is not None
    _GUARD_FDS.add(guard.stdin.fileno())
    return guard


def _stop_guard(guard: subprocess.Popen[bytes] | None) -> None:
    if guard is None or guard.stdin is None:
        return
    _GUARD_FDS.discard(guard.stdin.fileno())
    guard.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        guard.wait(timeout=15)


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up once in the harness so a worker inherits it ready: a
    ``ctypes.CDLL`` made in every child cost each one 0.2 ms and ~40 copy-on-write faults."""
    return ctypes.CDLL(None, use_errno=True).prctl


def _scratch_root() -> str | None:
    """The scratch root other runs' work dirs are in (the wall hides it): an unusable
    ``CRASH_HARNESS_TMPDIR`` was refused long before a worker starts."""
    try:
        return _scratch.scratch_root()
    except Exception:
        return None


def _die_with_parent(parent_pid: int) -> None:
    _prctl()(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class Supervisor:
    """Owns every worker process of a campaign; use it as a context manager."""

    def __init__(self, *, workdir: Path) -> None:
        self.workdir = workdir
        not_dumpable()  # no worker may ptrace the harness or read its memory (a floor)
        self._live: dict[int, RunningWorker] = {}
        self._cgroup_parent: str | None = None
        self._cgroup_owner = os.getpid()
        self._cgroup_checked = False
        self._guard: subprocess.Popen[bytes] | None = None
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
        return "cgroup" if self._cgroups() is not None else "walk"

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
        if self._guard is not None:
            known.add(self._guard.pid)
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

    def _cgroups(self) -> str | None:
        if not self._cgroup_checked:
            self._cgroup_checked = True
            _keeper.sweep_stale()  # what the keepers of a killed run (walk mode) still hold
            if os.environ.get(TREE_MODE_ENV, "") != "walk":
                base = _tree.cgroup2_base()
                if base is not None:
                    _tree.sweep_stale(base, CGROUP_PREFIX)
                    self._cgroup_owner = os.getpid()
                    self._cgroup_parent = _tree.make_cgroup(base, f"{CGROUP_PREFIX}{os.getpid()}")
                    if self._cgroup_parent is not None:
                        self._guard = _start_guard(self._cgroup_parent)
        return self._cgroup_parent

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
        stdout_path = logdir / f"{name}.stdout"
        stderr_path = logdir / f"{name}.stderr"
        parent = os.getpid()
        self._started += 1
        self._reap_ended(block=False)
        cgroups = self._cgroups()
        cgroup = None if cgroups is None else _tree.make_cgroup(cgroups, f"{name}-{self._started}")
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        _prctl()  # here, not in each child
        _keeper.libc()  # and in each keeper
        _secrets.ready_to_forget()
        walled = _wall.wanted()
        if walled:
            _wall.prepare()

        def run_worker(  # pragma: no cover
            parent: int, keeper: int | None, *, born_inside: bool = False, walled: bool = False
        ) -> NoReturn:
            os.close(events_r)
            os.close(control_w)
            for other in self._live.values():
                other.close_pipes()
            # the provider's pidfd and heartbeat are the harness's, not the worker's
            self.lifelines.close(in_child=True)
            self._child(
                target,
                parent=parent,
                name=name,
                arms=arms,
                trace_path=trace_path,
                stdout_path=stdout_path,
                stderr_path=stderr_path,
                events_fd=events_w,
                control_fd=control_r,
                # behind the wall the worker finds its own tree from its init (PID 1), and
                # its cgroup's files are read-only to it
                cgroup=None if walled else cgroup,
                born_inside=born_inside or walled,
                keeper=keeper,
                counter_dir=logdir / f"{name}.hits",
                hooks=hooks,
            )

        keeper: _keeper.Keeper | None = None
        born_inside = False
        ns_pid: int | None = None
        try:
            got = None
            if walled:  # an init in the worker's own namespaces, born in its cgroup
                view = _wall.view_for(scratch=_scratch_root(), workdir=self.workdir, own=logdir)
                got = _wall.spawn(lambda k: run_worker(k, k, walled=True), cgroup=cgroup, view=view)
            if got is not None:
                keeper, ns_pid = got
                pid = keeper.root
                _GUARD_FDS.update((keeper.hold_fd, keeper.report_fd))
                if cgroup is not None:
                    self.births["born in its cgroup"] += 1
            elif cgroup is None:  # walk mode: a keeper above the worker holds its orphans
                keeper = _keeper.spawn(lambda k: run_worker(k, k), close_in_worker=())
                pid = keeper.root
                _GUARD_FDS.update((keeper.hold_fd, keeper.report_fd))
            else:  # born in its cgroup where that can be done, else forked and moved there
                born = _born.fork_into(cgroup)
                pid = os.fork() if born is None else born
                born_inside = born is not None
                self.births["born in its cgroup" if born_inside else "moved to its cgroup"] += 1
        except OSError as exc:
            for fd in (events_r, events_w, control_r, control_w):
                os.close(fd)
            raise SupervisorError(f"cannot fork worker {name}: {exc}") from exc
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            run_worker(parent, None, born_inside=born_inside)
        os.close(events_w)
        os.close(control_r)
        # Both sides set the group, so a signal sent right after fork cannot miss it. Only the
        # child joins its cgroup (two joins of one pid contend in the kernel, ~8 ms), before
        # it runs anything that could fork: until then, a kill by group reaches all of it.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        worker = RunningWorker(
            name,
            pid,
            time.time(),
            stderr_path,
            arms,
            events_fd=events_r,
            control_fd=control_w,
            tree=ProcessTree(pid, cgroup, None if keeper is None else keeper.pid),
            keeper=keeper,
            ns_pid=ns_pid,
        )
        self._live[pid] = worker
        trace.append(
            trace_path, event="spawn", worker=name, pid=pid, arms=[a.to_json() for a in arms]
        )
        return worker

    @staticmethod
    def _child(
        target: Callable[[], None],
        *,
        parent: int,
        name: str,
        arms: list[Arm],
        trace_path: Path,
        stdout_path: Path,
        stderr_path: Path,
        events_fd: int,
        control_fd: int,
        cgroup: str | None,
        keeper: int | None,
        counter_dir: Path,
        hooks: bool = False,
        born_inside: bool = False,
    ) -> NoReturn:  # pragma: no cover - child side
        code = 0
        # No gc.freeze() here, though a full collection in a worker walks (and so copies) the
        # harness's whole heap (bench_fork_size.py: 20 ms at 75 MB, 4.6 ms frozen): workers
        # of an explore almost never run one, and frozen objects leave gc.get_objects(), which
        # a system under test may use (tests/_systems.py's hostile worker finds the harness's
        # admin client that way). A worker sees the collector as a plain fork leaves it.
        try:
            with contextlib.suppress(OSError):
                os.setpgid(0, 0)
            for fd in _GUARD_FDS:  # a worker, or its pool, must not keep a guard waiting
                with contextlib.suppress(OSError):
                    os.close(fd)
            if (
                cgroup is not None
                and not born_inside
                and not _tree.join_cgroup(cgroup, os.getpid())
            ):
                cgroup = None
            _die_with_parent(parent)
            _secrets.forget_provider_secrets()  # a provider's admin token is not the worker's
            forget_admin_tokens()  # nor the harness's admin clients it inherited
            _prctl()(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own (the harness's is 0)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            out = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.close(out)
            os.close(err)
            # The parent's sys.stdout/err may be capture objects (pytest); rebind to the files.
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            # Never touch the parent's faulthandler watchdog: its thread does not exist here.
            faulthandler.enable(file=2, all_threads=True)
            _boundary.configure(
                trace_path=str(trace_path),
                worker=name,
                arms=arms,
                events_fd=events_fd,
                control_fd=control_fd,
                tree=ProcessTree(os.getpid(), cgroup, keeper),
                counter_dir=str(counter_dir),
            )
            if hooks:  # this process, what it forks, and every Python program it execs
                from harness.engine.process import _hooks

                _hooks.install_in_worker()
            target()
        except BaseException:
            traceback.print_exc()
            code = 70
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def wait(self, worker: RunningWorker, *, timeout_s: float, trace_path: Path) -> WorkerOutcome:
        """Block until the worker ends (or its deadline passes) and say how it ended."""
        pidfd = pidfd_of(worker.pid)
        try:
            ready = self._poll([pidfd], timeout_s)
            stack_dump: str | None = None
            if not ready:
                stack_dump = self._dump_and_kill(worker, pidfd)
            status = self._reap(worker)
            # read once, and only when a crash line can matter: a death by signal
            events = trace.read(trace_path) if os.WIFSIGNALED(status) else []
            if worker.tree is not None and worker.tree.cgroup is None:
                _await_killers(worker, events)
            left = self._end_tree(worker)
            self._let_go(worker)
            self._live.pop(worker.pid, None)  # reaped; on an interrupt kill_all still owns it
            worker.ended = True
            worker.close_pipes()
        finally:
            os.close(pidfd)
        ended = time.time()
        outcome = self._classify(worker, status, events, ended, stack_dump)
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
        deadline = time.monotonic() + timeout_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            event = self.wait_event(worker, timeout_s=left)
            if event is None:
                return None
            if event.kind == "overdue_flagged":
                continue
            if event.kind != "paused":
                raise SupervisorError(f"expected {worker.name} to pause, it said {event.kind}")
            return Paused(worker, event.subject, event.hit)

    def wait_event(
        self, worker: RunningWorker, *, timeout_s: float, quiet_ok: bool = False
    ) -> WorkerEvent | None:
        """Next line from the worker's events pipe; None if the worker ended first.

        Past ``timeout_s`` it raises ``SupervisorError``, or returns None if ``quiet_ok``.
        """
        assert worker.events_fd is not None, "worker has no events pipe"
        deadline = time.monotonic() + timeout_s
        pidfd = pidfd_of(worker.pid)
        try:
            while b"\n" not in worker.pending:
                left = max(0.0, deadline - time.monotonic())
                ready = self._poll([worker.events_fd, pidfd], left)
                if worker.events_fd in ready:
                    chunk = os.read(worker.events_fd, 4096)
                    if chunk:
                        worker.pending += chunk
                        continue
                    return None  # pipe closed: the worker is gone
                if pidfd in ready:
                    return None
                if not ready:
                    if quiet_ok:
                        return None
                    raise SupervisorError(f"worker {worker.name} sent no event within {timeout_s}s")
        finally:
            os.close(pidfd)
        line, _, worker.pending = worker.pending.partition(b"\n")
        kind, subject, hit = line.decode().split()
        return WorkerEvent(kind, subject, int(hit), time.time())

    def next_event(
        self, workers: list[RunningWorker], *, timeout_s: float
    ) -> tuple[RunningWorker, WorkerEvent | None] | None:
        """The first line any of ``workers`` writes, as (worker, event), or (worker, None) for
        the first to end; None if nothing happens within ``timeout_s``.

        Several workers racing must be watched together: one may wait on another (a rival's
        lease), and a harness that listens to one at a time waits with it."""
        for worker in workers:
            if b"\n" in worker.pending:
                return worker, self._take_event(worker)
        deadline = time.monotonic() + timeout_s
        pidfds = {w.pid: pidfd_of(w.pid) for w in workers}
        try:
            while True:
                by_fd = {w.events_fd: w for w in workers if w.events_fd is not None}
                left = max(0.0, deadline - time.monotonic())
                ready = set(self._poll([*by_fd, *pidfds.values()], left))
                if not ready:
                    return None
                for fd in ready & set(by_fd):
                    worker = by_fd[fd]
                    chunk = os.read(fd, 4096)
                    if not chunk:
                        return worker, None  # pipe closed: the worker is gone
                    worker.pending += chunk
                    if b"\n" in worker.pending:
                        return worker, self._take_event(worker)
                for worker in workers:
                    if pidfds[worker.pid] in ready and worker.events_fd not in ready:
                        return worker, None
        finally:
            for fd in pidfds.values():
                os.close(fd)

    @staticmethod
    def _take_event(worker: RunningWorker) -> WorkerEvent:
        line, _, worker.pending = worker.pending.partition(b"\n")
        kind, subject, hit = line.decode().split()
        return WorkerEvent(kind, subject, int(hit), time.time())

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
        self._kill_tree(worker)

    @staticmethod
    def _reap(worker: RunningWorker) -> int:
        """Wait for the worker's first process to end; its wait status."""
        if worker.keeper is not None:
            return worker.keeper.wait_status()
        return os.waitpid(worker.pid, 0)[1]

    @staticmethod
    def _let_go(worker: RunningWorker) -> None:
        """Done with a worker: its keeper (walk mode) kills what is left under it and exits."""
        if worker.keeper is not None:
            _GUARD_FDS.difference_update((worker.keeper.hold_fd, worker.keeper.report_fd))
            worker.keeper.release()

    @staticmethod
    def _kill_tree(worker: RunningWorker) -> None:
        if worker.tree is not None:
            worker.tree.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)

    def _end_tree(self, worker: RunningWorker) -> list[_leftovers.Leftover]:
        """After the worker's first process is reaped: kill what is left, drop its cgroup;
        each process killed is named (``_leftovers.Leftover``), one that escaped the tree
        (out of its cgroup, handed to the harness as an orphan) too.

        A worker whose first process was killed under it (crash scope ``parent``) leaves a
        child at work: its orphans get ``ORPHAN_GRACE_S`` to finish and exit on their own,
        as they would on a machine where only the parent died."""
        if worker.tree is None:
            return []
        tree = worker.tree
        if any(a.scope == "parent" for a in worker.arms) and (tree.cgroup or tree.keeper):
            tree.wait_empty(ORPHAN_GRACE_S)
        remaining = worker.tree.members() - {worker.pid}
        left = {pid for pid in remaining if not _tree.dying(pid)}
        named = {pid: _leftovers.command_of(pid) for pid in left}
        if remaining:
            worker.tree.kill()
        if worker.tree.cgroup is not None:
            if worker.keeper is not None and worker.ns_pid is not None:
                # The wall's init: let go, it exits and the kernel ends its namespaces (every
                # process left in it is killed already). Tearing the namespaces down costs
                # ~9 ms (the mount namespace's unmounts wait for RCU), so the harness does
                # not wait: the init is reaped, and its cgroup removed, at the next start
                # (``known_pids`` keeps it from being taken for a leftover meanwhile).
                _GUARD_FDS.difference_update((worker.keeper.hold_fd, worker.keeper.report_fd))
                worker.keeper.release(wait=False)
                self._ending.append((worker.keeper.pid, worker.tree.cgroup))
            else:
                tree.wait_empty(DUMP_GRACE_S)
                _tree.remove_cgroup(worker.tree.cgroup)
        out = [
            _leftovers.Leftover(
                pid,
                named[pid],
                f"of worker {worker.name} was still running after its first process ended",
                _tree.dying(pid),
            )
            for pid in sorted(left)
        ]
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
    ) -> WorkerOutcome:
        """Stop a daemon worker as its library documents: ``sig`` to its first process (a
        warm shutdown lets it finish or hand back the task at hand), SIGKILL to its whole
        tree if it has not ended ``grace_s`` later. Which of the two it took is recorded."""
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
            if not wait_readable([pidfd], grace_s):
                worker.stopped_by = f"{sig.name}, then SIGKILL after {grace_s:g}s"
                trace.append(
                    trace_path,
                    event="stop_forced",
                    worker=worker.name,
                    pid=worker.pid,
                    grace_s=grace_s,
                )
                self._kill_tree(worker)
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

    def _dump_and_kill(self, worker: RunningWorker, pidfd: int) -> str:
        before = _size(worker.stderr_path)
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGABRT)  # faulthandler writes every thread's stack
        ready = wait_readable([pidfd], DUMP_GRACE_S)
        if not ready:
            self._kill_tree(worker)
        return read_tail(worker.stderr_path, STACK_DUMP_BYTES, start=before)

    def _classify(
        self,
        worker: RunningWorker,
        status: int,
        events: list[trace.TraceEvent],
        ended: float,
        stack_dump: str | None,
    ) -> WorkerOutcome:
        # a worker may print its environment (the provider credential is in it): keep neither
        # the secret in its stderr file (a kept work dir) nor in what the reports quote
        with contextlib.suppress(OSError):
            _secrets.scrub_file(worker.stderr_path)
        stderr_tail = _secrets.scrub(read_tail(worker.stderr_path, STDERR_TAIL_BYTES))
        stack_dump = None if stack_dump is None else _secrets.scrub(stack_dump)
        common: dict[str, Any] = {
            "worker": worker.name,
            "pid": worker.pid,
            "started_at": worker.started_at,
            "ended_at": ended,
            "stderr_tail": stderr_tail,
            "stack_dump": stack_dump,
        }
        if stack_dump is not None:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            return WorkerOutcome(
                kind=OutcomeKind.HUNG,
                exit_code=None,
                signal=_signame(sig),
                boundary=None,
                hit=None,
                **common,
            )
        if worker.stopped_by is not None:  # the harness asked it to end; however it ended
            return WorkerOutcome(
                kind=OutcomeKind.STOPPED,
                exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                signal=_signame(os.WTERMSIG(status)) if os.WIFSIGNALED(status) else None,
                boundary=None,
                hit=None,
                **common,
            )
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
            kind = OutcomeKind.COMPLETED if code == 0 else OutcomeKind.DIED
            return WorkerOutcome(
                kind=kind, exit_code=code, signal=None, boundary=None, hit=None, **common
            )
        sig = os.WTERMSIG(status)
        # the crash may have been reached by another process of the worker (a work-horse)
        crashes = [
            ev
            for ev in events
            if ev.event == "crash"
            # behind the wall a pid in the trace is its namespace's: only the name tells
            and (ev.worker == worker.name or (worker.ns_pid is None and ev.pid == worker.pid))
        ]
        if sig != signal.SIGKILL:  # no planned crash dies any other way, whatever the trace says
            return WorkerOutcome(
                kind=OutcomeKind.DIED,
                exit_code=None,
                signal=_signame(sig),
                boundary=None,
                hit=None,
                **common,
            )
        unasked = [ev for ev in crashes if not _planned(worker, ev)]
        if crashes and not unasked:
            crash = crashes[-1]
            return WorkerOutcome(
                kind=OutcomeKind.CRASHED_AS_PLANNED,
                exit_code=None,
                signal="SIGKILL",
                boundary=crash.boundary,
                hit=crash.hit,
                **common,
            )
        if unasked:
            note = (
                f"its trace has {_describe_crash(unasked[0])}, which the harness never asked "
                f"of this worker (arms: {_describe_arms(worker)}; harness kills: "
                f"{', '.join(worker.harness_kills) or 'none'})"
            )
        else:
            note = "SIGKILL with no crash line in the trace"
        return WorkerOutcome(
            kind=OutcomeKind.KILLED_UNPLANNED,
            exit_code=None,
            signal="SIGKILL",
            boundary=None,
            hit=None,
            note=note,
            **common,
        )

    def _reap_ended(self, *, block: bool) -> None:
        """Reap the inits of walled workers that were let go (waiting for each with
        ``block``), and remove their cgroups."""
        still: list[tuple[int, str]] = []
        for pid, cgroup in self._ending:
            if block:
                _await_init(pid)
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
        self._ending = still

    def kill_all(self) -> None:
        """SIGKILL every process group this supervisor started and reap it."""
        self.kill_live()
        self._reap_ended(block=True)
        # a forked job process inherits this object; only the creator removes the directory
        if self._cgroup_parent is not None and self._cgroup_owner == os.getpid():
            _tree.remove_cgroup(self._cgroup_parent)
            _stop_guard(self._guard)
            self._guard = None
        if self._reaper == os.getpid():
            _leftovers.become_subreaper(on=False)
            self._reaper = None

    def kill_live(self) -> None:
        """SIGKILL every worker still running (a case the harness must give up) and reap it;
        the supervisor can start workers again after."""
        for pid in list(self._live):
            worker = self._live.get(pid)
            if worker is not None:
                self._kill_tree(worker)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                if worker is not None:
                    self._reap(worker)
                else:
                    os.waitpid(pid, 0)
            worker = self._live.pop(pid, None)
            if worker is not None:
                self._end_tree(worker)
                self._let_go(worker)
                worker.close_pipes()


def _await_init(pid: int) -> None:
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


def _await_killers(worker: RunningWorker, events: list[trace.TraceEvent]) -> None:
    """Walk mode: wait for the process that killed the worker from inside to be gone too.

    A worker-scope crash in a member (a work-horse) kills every other member and waits for
    them, then the root, then itself; the root's death is what ``wait`` sees, and a walk from
    a reaped root finds nothing. The killer's own pid is on its crash line, so wait on that.
    """
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


def _planned(worker: RunningWorker, crash: trace.TraceEvent) -> bool:
    """Did the harness ask for this crash line? A boundary crash must be covered by one of
    the worker's crash arms (or a pause arm the harness released with ``crash``); a line
    without a boundary must be a kill the harness recorded itself, with the same reason."""
    reason = (crash.detail or {}).get("reason")
    if crash.boundary is None or reason is not None:  # a kill the harness made itself
        return reason is not None and reason in worker.harness_kills
    hit = crash.hit
    if not isinstance(hit, int):
        return False
    return any(
        arm.boundary == crash.boundary
        and arm.covers(hit)
        and (arm.action == "crash" or (arm.action == "pause" and worker.crash_released))
        for arm in worker.arms
    )


def _describe_crash(crash: trace.TraceEvent) -> str:
    if crash.boundary is None:
        return f"a crash line for a harness kill ({(crash.detail or {}).get('reason')!r})"
    return f"a crash line at {crash.boundary}#{crash.hit}"


def _describe_arms(worker: RunningWorker) -> str:
    arms = [
        f"{a.action}@{a.boundary}#{a.hit}" + (f" x{a.count}" if a.count > 1 else "")
        for a in worker.arms
    ]
    return ", ".join(arms) or "none"


def pidfd_of(pid: int) -> int:
    """A pidfd of a worker's first process, readable once it has ended. A walled worker is
    its init's child, not the harness's: when the harness killed its cgroup, the init died
    with it and reaped it, so it may be gone outright; then a descriptor that is readable
    already (the worker's wait status comes from its init's pipe: SIGKILL)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        r, w = os.pipe()
        os.close(w)
        return r


def wait_readable(fds: list[int], timeout_s: float | None) -> list[int]:
    """``select`` without its 1024-descriptor ceiling (long campaigns open many files)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
    return [fd for fd, _ in poller.poll(timeout_ms)]


def _signame(sig: int | None) -> str | None:
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_tail(path: Path, limit: int, *, start: int = 0) -> str:
    """The last ``limit`` bytes of the file at ``path`` (from ``start`` on) as text; when
    more came before them, a first line says how many bytes were cut and where they are.

    Only those bytes are read: a worker that prints gigabytes costs the harness nothing."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            begin = max(start, size - limit)
            f.seek(begin)
            data = f.read(limit)
    except OSError:
        return ""
    if begin == start:
        return data.decode(errors="replace")
    cut = begin - start
    while data[:1] and 0x80 <= data[0] <= 0xBF:  # not a character cut in two
        data = data[1:]
        cut += 1
    head = f"[{cut} bytes cut before this; all of it is {path.name} in the work dir]\n"
    return head + data.decode(errors="replace")
