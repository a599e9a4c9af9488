"""Everything one case needs while it runs, and the verbs a fault module uses to act.

A fault module never forks, signals or touches the database itself: it asks the context to
spawn, pause, release, stop, move the clock, change the roster, snapshot or restore. So every
action lands in the trace, and every fault works on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import replace as _replace_arm
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from fake_providers import Effect, FaultRule, ProviderProcess
from harness.clock import SharedClock
from harness.engine.plan.schedule import CaseSpec, Step
from harness.engine.plan.workload import Workload
from harness.engine.process._boundary import Arm
from harness.engine.process._cpu_wait import CpuSample, CpuWait, CpuWatch
from harness.engine.process._daemon_watch import (
    DaemonWatch,
    Deadline,
    Reading,
    Settled,
    SpawnMarks,
    lines_by,
    trace_since,
)
from harness.engine.process._faketime import write_offset
from harness.engine.process.lifecycle import Lifecycle
from harness.engine.process.settle import Settle
from harness.engine.process.supervisor import (
    DUMP_GRACE_S,
    OutcomeKind,
    Paused,
    RunningWorker,
    Supervisor,
    WorkerEvent,
    WorkerOutcome,
    pidfd_of,
    wait_readable,
)
from harness.engine.results import Landing, StepRecord
from harness.engine.store import _db, trace
from harness.systems import System
from harness.worker_config import WorkerConfig

#: fresh workers a case may start to finish its work before it gives up
MAX_FINISH_WORKERS = 3

#: outcomes that mean a worker did something the harness did not ask for
ANOMALIES = (OutcomeKind.DIED, OutcomeKind.KILLED_UNPLANNED, OutcomeKind.HUNG)


@dataclass
class CaseContext:
    system: System
    workload: Workload
    target: _db.DatabaseTarget
    provider: ProviderProcess
    supervisor: Supervisor
    secret: str
    case_dir: Path
    clock: SharedClock
    worker_deadline_s: float
    base_config: WorkerConfig
    outcomes: list[WorkerOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    provider_rules: list[FaultRule] = field(default_factory=list)
    #: False once something (a crash, a restore) leaves work for a fresh worker to finish
    settled: bool = False
    #: run -> destinations it should reach (the roster when its result commits)
    intended: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: a dead worker's lease must lapse before the next one starts
    needs_gap: bool = False
    #: (wall time, seconds) of every provider clock move in this campaign, for timelines
    provider_advances: list[tuple[float, float]] = field(default_factory=list)
    #: what a crash kills: the whole worker tree, or only the process at the boundary
    crash_scope: str = "worker"
    #: how to tell that a third-party system has settled (None: a worker that ends has)
    settle: Settle | None = None
    started_at: float = field(default_factory=time.time)
    #: the case being run: with the workload's seed, what every choice a fault makes is
    #: drawn from (never from which worker got somewhere first)
    case: CaseSpec | None = None
    #: one record per planned step, in order, once the step has run (or was skipped)
    steps: list[StepRecord] = field(default_factory=list)
    #: step index -> the provider rule that step added (confirmed by the provider's count)
    step_rules: dict[int, FaultRule] = field(default_factory=dict)
    #: set by a liveness fault: a worker whose watchdog flags overdue work is killed and
    #: replaced (the fault asked for it); otherwise the flag is only recorded
    replace_flagged_workers: bool = False
    #: how the worker lives and ends (a daemon is stopped once settled) and tells time
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: True once a daemon's settle deadline passed: no fresh worker is started after that
    gave_up: bool = False
    #: the provider epoch the harness opened for this case: every read of the provider's
    #: log names it (None: the provider's current epoch, for a context built by hand)
    provider_epoch: int | None = None
    #: what someone other than the harness did to the provider during the case (a reset,
    #: an edit of its log): the case cannot pass
    provider_doubts: list[str] = field(default_factory=list)
    #: every provider of the case by name, the first being ``provider`` (empty: ``provider``
    #: alone, for a context built by hand); each has its own epoch and fault rules
    providers: dict[str, ProviderProcess] = field(default_factory=dict)
    #: provider name -> the epoch the harness opened on it for this case
    provider_epochs: dict[str, int] = field(default_factory=dict)
    #: provider name -> its armed rules (the first provider's list is ``provider_rules``)
    rules_by_provider: dict[str, list[FaultRule]] = field(default_factory=dict)
    #: the version a ``deploy`` step starts (None: the same system again), and what runs on
    #: the case's database between the two (a migration)
    next_system: System | None = None
    prepare_next: Callable[[WorkerConfig], None] | None = None
    #: which version the next worker runs: 1 until a deploy, then 2, ...
    version: int = 1
    #: set by a fault that took something from under a running worker (its database
    #: server): an exit of that worker is then normal, and it is restarted as after a crash
    exit_expected_because: str | None = None
    _torn_down: bool = False
    _spawned: int = 0
    #: daemon worker name -> what the trace and the provider held when it was spawned
    _marks: dict[str, SpawnMarks] = field(default_factory=dict)
    #: seconds from spawn to first sign of life of this case's daemon workers so far
    _start_delays: list[float] = field(default_factory=list)
    #: worker name -> samples of its CPU wait
    _cpu: dict[str, CpuWatch] = field(default_factory=dict)
    _step_index: int | None = None
    _step_record: StepRecord | None = None

    @property
    def trace_path(self) -> Path:
        return self.case_dir / "trace.jsonl"

    # -- workers ----------------------------------------------------------------------------

    def config(self, name: str) -> WorkerConfig:
        return _replace(self.base_config, worker_name=name)

    def spawn(self, arms: list[Arm] | None = None) -> RunningWorker:
        if self.needs_gap:
            self.needs_gap = False
            self.restart_gap()
        self._spawned += 1
        name = f"w{self._spawned}"
        if self.lifecycle.daemon:  # what was there before it, so its first sign shows
            self._marks[name] = SpawnMarks(
                _size(self.trace_path), len(self.all_case_effects()), time.monotonic()
            )
        return self.supervisor.start(
            name,
            partial(self.system.main, self.config(name)),
            trace_path=self.trace_path,
            arms=[_replace_arm(a, scope=self.crash_scope) for a in arms or []],
            logdir=self.case_dir,
            hooks=self.system.discover,
        )

    def wait(self, worker: RunningWorker) -> WorkerOutcome:
        if self.lifecycle.daemon:
            outcome = self._run_daemon(worker)
        else:
            outcome = self.supervisor.wait(
                worker, timeout_s=self.worker_deadline_s, trace_path=self.trace_path
            )
        self._expected_exit(outcome)
        self.outcomes.append(outcome)
        self.settled = outcome.kind is OutcomeKind.COMPLETED or (
            outcome.kind is OutcomeKind.STOPPED and not self.gave_up
        )
        if outcome.kind in (OutcomeKind.CRASHED_AS_PLANNED, OutcomeKind.EXITED_AFTER_CRASH):
            self.needs_gap = True
        if outcome.kind in ANOMALIES:
            detail = f" by {outcome.signal}" if outcome.signal else ""
            detail += f" with exit code {outcome.exit_code}" if outcome.exit_code else ""
            detail += f": {outcome.note}" if outcome.note else ""
            self.notes.append(f"worker {outcome.worker} (pid {outcome.pid}) {outcome.kind}{detail}")
        return outcome

    def _expected_exit(self, outcome: WorkerOutcome) -> None:
        """An exit the scenario calls normal after a crash of one of the worker's processes
        (``exits_after_crash``) is no anomaly: the worker is restarted as after a crash."""
        if outcome.kind is not OutcomeKind.DIED or outcome.exit_code is None:
            return
        if self.exit_expected_because is not None:
            outcome.kind = OutcomeKind.EXITED_AFTER_CRASH
            outcome.note = (
                f"exit {outcome.exit_code} after {self.exit_expected_because}: restarted, as"
                " its supervisor would"
            )
            return
        if outcome.exit_code not in self.lifecycle.exits_after_crash:
            return
        crash = next(
            (
                ev
                for ev in trace.read(self.trace_path)
                if ev.event == "crash"
                and ev.worker == outcome.worker
                and ev.pid != outcome.trace_pid
            ),
            None,
        )
        if crash is None:  # nothing of it was killed: an exit 1 is the worker's own failure
            return
        outcome.kind = OutcomeKind.EXITED_AFTER_CRASH
        outcome.note = (
            f"exit {outcome.exit_code} after its process {crash.pid} was killed at "
            f"{crash.boundary}#{crash.hit}: normal by the scenario's exits_after_crash"
        )

    def _run_daemon(self, worker: RunningWorker) -> WorkerOutcome:
        """Let a worker that never exits on its own run until the system has settled (or the
        settle deadline passes), then stop it as its library documents. The quiet window and
        the deadline count from its first sign of life
        (``harness.engine.process._daemon_watch``)."""
        settle = self.settle or Settle(probe=None)
        config = self.config("settle")
        marks = self._marks.get(worker.name) or SpawnMarks(0, 0, time.monotonic())
        watch = DaemonWatch(
            settle,
            spawned_at=marks.at,
            startup_s=self._startup_allowance(settle),
            cpu=self.cpu_watch(worker),
        )

        def read() -> Reading:
            done, output = settle.settled(config)  # the probe first, then the provider's
            effects = self.all_case_effects()  # logs, so they are at least as fresh
            accepted = {(e.run_id, e.destination) for e in effects if e.accepted}
            since = trace_since(self.trace_path, marks.trace_offset, worker.name)
            return Reading(
                at=time.monotonic(),
                probe_done=done,
                probe_output=output,
                delivered=all(
                    (run, dest) in accepted
                    for run, dests in self.intended.items()
                    for dest in dests
                ),
                own_lines=since.own_lines,
                requests=max(0, len(effects) - marks.requests),
                busy_lines=since.busy_lines,
            )

        while True:
            if self.supervisor.ends_within(worker, settle.interval_s):
                self._note_start(worker, watch)
                return self.supervisor.wait(
                    worker, timeout_s=DUMP_GRACE_S, trace_path=self.trace_path
                )
            decision = watch.poll(read)
            if decision is None:
                continue
            self._note_start(worker, watch)
            if isinstance(decision, Settled):
                self.record(
                    "settled",
                    rounds=watch.rounds,
                    after_s=round(time.time() - self.started_at, 3),
                    by=decision.by,
                    probe=decision.reading.probe_output,
                    **self._life(watch),
                )
                return self._stop(worker, f"settled: {decision.by}")
            self._missed_deadline(watch, decision)
            return self._stop(worker, "settle deadline")

    def _crash_underway(self, worker: RunningWorker) -> bool:
        """Whether a process of ``worker`` traced a planned crash that ends the worker's first
        process (scope ``worker`` or ``parent``): it is being killed."""
        if not any(a.action in ("crash", "pause") and a.scope != "process" for a in worker.arms):
            return False
        return any(
            ev.event == "crash" and ev.worker == worker.name for ev in trace.read(self.trace_path)
        )

    def _startup_allowance(self, settle: Settle) -> float:
        """How long a daemon may show no sign of life before it counts as started: the
        worker deadline until a worker of this case has shown one, then twice the slowest
        start seen (a restarted worker with nothing left to do never shows one)."""
        if not self._start_delays:
            return self.worker_deadline_s
        return max(settle.quiet_s, 2 * max(self._start_delays))

    def _note_start(self, worker: RunningWorker, watch: DaemonWatch) -> None:
        """Remember how long this worker took to show a sign of life (the next one's
        allowance); one that ended between two looks shows it in the trace."""
        start = watch.start_s
        if watch.alive_by is not None and "no sign" in watch.alive_by:
            self.record("no_sign_of_life", target=worker.name, after_s=round(start or 0, 3))
            return
        if start is None:
            marks = self._marks.get(worker.name)
            first = (
                None
                if marks is None
                else lines_by(self.trace_path, marks.trace_offset, worker.name)[1]
            )
            start = None if first is None else max(0.0, first - worker.started_at)
        if start is not None:
            self._start_delays.append(start)

    @staticmethod
    def _life(watch: DaemonWatch) -> dict[str, Any]:
        return {
            "first_sign_of_life": watch.alive_by,
            "started_after_s": None if watch.start_s is None else round(watch.start_s, 3),
        }

    def cpu_watch(self, worker: RunningWorker) -> CpuWatch:
        """The samples of how long ``worker``'s tree waited for CPU
        (``harness.engine.process._cpu_wait``)."""
        found = self._cpu.get(worker.name)
        if found is None or found.tree is not worker.tree:
            found = self._cpu[worker.name] = CpuWatch(worker.name, worker.tree, worker.started_at)
        return found

    def _missed_deadline(self, watch: DaemonWatch, decision: Deadline) -> None:
        """Record a missed settle deadline with the figures that decide whether the system
        or the machine missed it (the ``liveness`` checker reads them)."""
        settle = self.settle or Settle(probe=None)
        cpu = decision.cpu
        output = decision.reading.probe_output
        age = round(time.time() - self.started_at, 3)
        self.record(
            "settle_deadline",
            deadline_s=settle.deadline_s,
            age_s=age,
            probe=output,
            cpu=cpu.to_json(),
            never_started=decision.never_started,
            **self._life(watch),
        )
        if cpu.starved:
            self.notes.append(f"undecided: the machine starved the worker: {cpu.describe()}")
        else:
            since = "" if watch.start_s is None else " after its first sign of life"
            self.notes.append(
                f"still pending at the settle deadline ({settle.deadline_s}s{since}; work "
                f"{age}s old){': ' + output.strip() if output.strip() else ''}"
            )
        self.gave_up = True

    def deploy(self, worker: RunningWorker, *, reason: str) -> WorkerOutcome:
        """Stop ``worker``, held at a boundary, the way a deploy does: the stop signal to
        its first process, the worker let go on at once to meet it where it was, SIGKILL to
        what is left of its tree once the grace has passed. Every worker after it runs the
        next version (after its migration), and the case is unsettled: the next version has
        to finish, surface or strand what this one left."""
        outcome = self.supervisor.stop(
            worker,
            sig=self.lifecycle.signum,
            grace_s=self.lifecycle.stop_grace_s,
            trace_path=self.trace_path,
            reason=reason,
            then=lambda: self.release(worker),
        )
        self.outcomes.append(outcome)
        if self.next_system is not None:
            if self.prepare_next is not None:
                self.prepare_next(self.config("migration"))
            self.system = self.next_system
        self.version += 1
        self.record("deploy", worker_stopped=worker.name, version=self.version, to=self.system.name)
        self.settled = False
        self.needs_gap = True  # its leases lapse before the next version claims
        return outcome

    def _stop(self, worker: RunningWorker, reason: str) -> WorkerOutcome:
        if self._crash_underway(worker) and self.supervisor.ends_within(worker, DUMP_GRACE_S):
            # its planned crash was on its way when the system looked settled (a pool child
            # traced it and is killing the tree): a stop now would take the crash's place
            return self.supervisor.wait(worker, timeout_s=DUMP_GRACE_S, trace_path=self.trace_path)
        return self.supervisor.stop(
            worker,
            sig=self.lifecycle.signum,
            grace_s=self.lifecycle.stop_grace_s,
            trace_path=self.trace_path,
            reason=reason,
        )

    def watch(
        self,
        worker: RunningWorker,
        *,
        injected_at: float | None = None,
        budget_s: float | None = None,
        kill_when_flagged: bool = False,
    ) -> None:
        """Wait for a worker to end, recording when its watchdog flags overdue work.

        Only under a liveness fault (``kill_when_flagged``, with the ``budget_s`` the fault
        allows) is a worker that flags overdue work killed and replaced, as a supervisor
        would replace a silent worker, and one that neither ends nor flags anything in time
        recorded as undetected and killed. Otherwise the harness kills nothing it was not
        asked to: a worker that is slow (a provider holding its reply) is left to finish,
        and the flag is only recorded (``overdue_left_running``).
        """
        if self.lifecycle.daemon:  # it never ends on its own: settling ends it
            self.wait(worker)
            return
        cpu = self.cpu_watch(worker)
        since_injection = cpu.mark()
        while True:
            waited_from = time.monotonic()
            budget_from = cpu.mark()
            event = self.supervisor.wait_event(
                worker, timeout_s=budget_s or self.worker_deadline_s, quiet_ok=True
            )
            # None is a timeout, the worker's end, or its events pipe closing. The pipe can
            # close a moment before the pidfd says the worker ended, or (a worker that closed
            # it) long before: either way its watchdog can say nothing more, so the rest of
            # the budget is waited out on the pidfd alone, never on the worker's deadline
            silent: CpuWait | None = None
            if event is None and budget_s is not None and not _ended(worker):
                left = budget_s - (time.monotonic() - waited_from)
                if left <= 0 or not self.supervisor.ends_within(worker, left):
                    event, silent = self._rest_of_budget(worker, budget_s, budget_from)
            if silent is not None:
                waited = silent  # read before the kill takes the tree away
                self.record(
                    "liveness_undetected",
                    target=worker.name,
                    budget_s=budget_s,
                    cpu=waited.to_json(),
                )
                if waited.starved:
                    self.notes.append(
                        f"undecided: the machine starved the worker: {waited.describe()}"
                    )
                self.supervisor.kill(worker, trace_path=self.trace_path, reason="undetected")
                self.wait(worker)
                return
            if event is None:
                self.wait(worker)
                return
            if event.kind == "overdue_flagged" and not kill_when_flagged:
                self.record("overdue_left_running", target=worker.name, delivery_id=event.subject)
                continue
            if event.kind == "overdue_flagged":
                self.record(
                    "liveness_detected",
                    target=worker.name,
                    delivery_id=event.subject,
                    detection_s=(
                        round(event.at - injected_at, 4) if injected_at is not None else None
                    ),
                    cpu=cpu.since(since_injection, 0.0).to_json(),
                )
                self.supervisor.kill(worker, trace_path=self.trace_path, reason="overdue work")
                self.wait(worker)
                return

    def _rest_of_budget(
        self, worker: RunningWorker, budget_s: float, start: CpuSample
    ) -> tuple[WorkerEvent | None, CpuWait | None]:
        """The budget's wall time is spent: give the worker back the time it waited for CPU
        in it (up to the stretch), still listening for its flag. Returns (its flag, None),
        (None, None) when it ended, or (None, the figures) when it stayed silent."""
        cpu = self.cpu_watch(worker)
        while True:
            window = cpu.since(start, budget_s)
            if window.over:
                return None, window
            began, more = time.monotonic(), window.more_s()
            event = self.supervisor.wait_event(worker, timeout_s=more, quiet_ok=True)
            if event is not None:
                return event, None
            if _ended(worker):
                return None, None
            rest = more - (time.monotonic() - began)
            # its events pipe closed early
            if rest > 0 and self.supervisor.ends_within(worker, rest):
                return None, None

    def finish(self) -> None:
        """Fresh workers finish whatever the faults left, replacing any that go silent; with a
        settle probe, keep helping (recovery hook, fresh worker) until the system says nothing
        is pending or the deadline passes."""
        for _ in range(MAX_FINISH_WORKERS):
            if self.settled or self.anomalous or self.gave_up:
                break
            if self.lifecycle.daemon and self.settle is not None and self.settle.recovery:
                ok, hook_output = self.settle.recover(self.config("settle"))
                self.record("recovery_hook", ok=ok, output=hook_output)
            self.watch(self.spawn(), kill_when_flagged=self.replace_flagged_workers)
        else:
            if not self.settled:
                self.notes.append(f"still unsettled after {MAX_FINISH_WORKERS} fresh workers")
        if self.settle is not None and not self.anomalous and not self.lifecycle.daemon:
            self._settle(self.settle)

    def tear_down(self) -> None:
        """The scenario's teardown hook, once per case, however the case ended."""
        if self._torn_down or self.settle is None or self.settle.teardown is None:
            return
        self._torn_down = True
        try:
            ok, output = self.settle.tear_down(self.config("settle"))
        except Exception as exc:  # a broken hook is reported, never a lost case
            ok, output = False, f"{type(exc).__name__}: {exc}"
        self.record("teardown", ok=ok, output=output)
        if not ok:
            self.notes.append(f"teardown {self.settle.teardown!r} failed: {output.strip()}")

    def _settle(self, settle: Settle) -> None:
        config = self.config("settle")
        deadline = time.monotonic() + settle.deadline_s
        rounds = 0
        while True:
            done, output = settle.settled(config)
            if done:
                after = round(time.time() - self.started_at, 3)
                self.record("settled", rounds=rounds, after_s=after)
                return
            if time.monotonic() >= deadline:
                # decide on an answer given after the deadline, not one from before it
                done, output = settle.settled(config)
                if done:
                    after = round(time.time() - self.started_at, 3)
                    self.record("settled", rounds=rounds, after_s=after, at_deadline=True)
                    return
                age = round(time.time() - self.started_at, 3)
                self.record(
                    "settle_deadline", deadline_s=settle.deadline_s, age_s=age, probe=output
                )
                self.notes.append(
                    f"still pending at the settle deadline ({settle.deadline_s}s; work {age}s old)"
                )
                return
            # Recovery in a real system runs on its own wall-clock timers (a visibility
            # timeout, a heartbeat), which nothing here can signal or compress: look again
            # after the scenario's probe interval.
            self.supervisor.pause(min(settle.interval_s, max(0.0, deadline - time.monotonic())))
            ok, hook_output = settle.recover(config)
            self.record("recovery_hook", ok=ok, output=hook_output)
            self.watch(self.spawn(), kill_when_flagged=self.replace_flagged_workers)
            rounds += 1
            if self.anomalous:
                return

    def wait_paused(self, worker: RunningWorker) -> Paused | None:
        return self.supervisor.wait_paused(worker, timeout_s=self.worker_deadline_s)

    def release(self, worker: RunningWorker, verb: str = "continue") -> None:
        self.supervisor.release(worker, verb)

    def stop(self, worker: RunningWorker) -> None:
        self.record("sigstop", target=worker.name)
        self.supervisor.send_signal(worker, signal.SIGSTOP)

    def resume(self, worker: RunningWorker) -> None:
        self.record("sigcont", target=worker.name)
        self.supervisor.send_signal(worker, signal.SIGCONT)

    @property
    def anomalous(self) -> bool:
        return any(o.kind in ANOMALIES for o in self.outcomes)

    def restart_gap(self) -> None:
        """Time passes while a crashed worker is replaced: its lease lapses, as in production
        (or as long as the scenario's ``restart_gap_s`` says)."""
        gap = self.lifecycle.restart_gap_s
        seconds = self.base_config.lease_s if gap is None else gap
        if seconds > 0:
            self.advance_clock(seconds, reason="restart")

    # -- what became of each planned step ----------------------------------------------------

    def begin_step(self, index: int, step: Step) -> None:
        self._step_index = index
        self._step_record = None

    def end_step(self, step: Step) -> StepRecord:
        """Close the current step; one that said nothing about itself is *unconfirmed*."""
        record = self._step_record or StepRecord(
            str(step), Landing.UNCONFIRMED, "the fault module recorded no evidence that it acted"
        )
        self.steps.append(record)
        self._step_index = self._step_record = None
        return record

    def skip_step(self, step: Step, why: str) -> None:
        self.steps.append(StepRecord(str(step), Landing.NOT_RUN, why))

    @property
    def step_index(self) -> int:
        assert self._step_index is not None, "no step is running"
        return self._step_index

    def landed(self, step: Step, detail: str, *, worker: RunningWorker | None = None) -> None:
        """The step happened; ``detail`` says what shows it (kept in the report)."""
        hits = None if worker is None else self.hits_of(worker, step.boundary)
        self._step_record = StepRecord(str(step), Landing.LANDED, detail, hits)

    def not_reached(self, step: Step, worker: RunningWorker) -> None:
        """The armed hit never came: say how far the worker got, so the plan can be fixed."""
        hits = self.hits_of(worker, step.boundary)
        detail = (
            f"{worker.name} reached {step.boundary} {hits} time(s) and ended; "
            f"hit {step.hit} never came"
        )
        self._step_record = StepRecord(str(step), Landing.NOT_REACHED, detail, hits)
        self.notes.append(f"{step}: not landed: {detail}")

    def not_reached_far_side(self, step: Step, worker: RunningWorker, counted: int) -> None:
        """A far-side point's k-th accepted request never came: the provider says how many
        it accepted while ``worker`` ran (the step did not land: never a pass)."""
        detail = (
            f"{worker.name} ended; the provider accepted {counted} request(s) while it ran;"
            f" request #{step.hit} never came"
        )
        self._step_record = StepRecord(str(step), Landing.NOT_REACHED, detail, counted)
        self.notes.append(f"{step}: not landed: {detail}")

    def not_landed(self, step: Step, detail: str) -> None:
        """The step ran but did not do what it is for (e.g. a race with a single racer)."""
        self._step_record = StepRecord(str(step), Landing.UNCONFIRMED, detail)
        self.notes.append(f"{step}: not landed: {detail}")

    def provider_name(self, name: str | None = None) -> str:
        """``name``, or the first provider's name when a step names none."""
        if name is not None:
            return name
        return next(iter(self.providers), "") if self.providers else ""

    def provider_named(self, name: str | None = None) -> ProviderProcess:
        """The provider a step names (``fault@NAME``); the first one when it names none."""
        if name is None or not self.providers:
            return self.provider
        return self.providers[name]

    def _rules_of(self, name: str | None) -> list[FaultRule]:
        if name is None or not self.providers or self.provider_named(name) is self.provider:
            return self.provider_rules
        return self.rules_by_provider.setdefault(name, [])

    def rule_position(self, rule: FaultRule, *, provider: str | None = None) -> int | None:
        """Where ``rule`` (this very object) sits among its provider's armed rules."""
        return next((i for i, r in enumerate(self._rules_of(provider)) if r is rule), None)

    def hits_of(self, worker: RunningWorker, boundary: str | None) -> int:
        """How many times any process of ``worker`` reached ``boundary`` (from the trace)."""
        if boundary is None:
            return 0
        return max(
            (
                ev.hit or 0
                for ev in trace.read(self.trace_path)
                if ev.worker == worker.name and ev.boundary == boundary
            ),
            default=0,
        )

    def crash_event(self, worker: RunningWorker, step: Step) -> trace.TraceEvent | None:
        """The trace line in which ``worker`` died at this step's armed boundary hit."""
        return next(
            (
                ev
                for ev in trace.read(self.trace_path)
                if ev.event == "crash"
                and ev.worker == worker.name
                and ev.boundary == step.boundary
                and ev.hit == step.hit
            ),
            None,
        )

    # -- the world --------------------------------------------------------------------------

    def record(self, event: str, **detail: Any) -> None:
        trace.append(self.trace_path, event=event, worker="harness", pid=0, **detail)

    def advance_clock(self, seconds: float, *, reason: str) -> None:
        """Move the case clock forward: the workers and the provider (which follows the
        case's clock file) read the same file."""
        self.clock.advance(seconds)
        self.provider_advances.append((time.time(), seconds))
        if self.base_config.fake_time_file is not None:  # the worker's wall clock follows
            write_offset(
                Path(self.base_config.fake_time_file),
                sum(moved for _, moved in self.provider_advances),
            )
        self.record("clock_jump", seconds=seconds, reason=reason)

    def case_effects(self) -> list[Effect]:
        """The first provider's records of this case's epoch, by number (never "the current
        one": a worker that reset the provider must not empty the evidence)."""
        if self.provider_epoch is None:
            return self.provider.admin.effects()
        return self.provider.admin.effects(epoch=self.provider_epoch)

    def all_case_effects(self) -> list[Effect]:
        """Every provider's records of this case's epoch (each on its own epoch number)."""
        if not self.providers:
            return self.case_effects()
        found: list[Effect] = []
        for name, provider in self.providers.items():
            epoch = self.provider_epochs.get(name)
            found.extend(provider.admin.effects(epoch=epoch) if epoch is not None else [])
        return found

    def add_provider_rule(self, rule: FaultRule, *, provider: str | None = None) -> None:
        """Arm a step's provider fault ahead of the workload's own rules: the provider
        applies the first rule that fires, and a planned step must not lose its request to
        a background fault (it would then never land). ``provider`` names which one
        (``fault@NAME``); None: the first."""
        rules = self._rules_of(provider)
        if self._step_index is None:
            rules.append(rule)
        else:
            ahead = sum(1 for r in self.step_rules.values() if any(r is x for x in rules))
            rules.insert(ahead, rule)
            self.step_rules[self._step_index] = rule
        self.provider_named(provider).admin.set_faults(rules)

    def engine(self) -> Engine:
        return self.target.engine()

    def with_engine(self, fn: Callable[[Engine], Any]) -> Any:
        engine = self.engine()
        try:
            return fn(engine)
        finally:
            engine.dispose()


def _replace(config: WorkerConfig, **changes: Any) -> WorkerConfig:
    from dataclasses import replace

    return replace(config, **changes)


def _ended(worker: RunningWorker) -> bool:
    # a zombie (exited, not yet reaped) still answers kill(0): its pidfd says it ended
    try:
        return _ends_within(worker, 0)
    except ProcessLookupError:  # reaped already
        return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _ends_within(worker: RunningWorker, seconds: float) -> bool:
    """Whether the worker's first process ends within ``seconds`` (its pidfd turns ready)."""
    fd = pidfd_of(worker.pid)
    try:
        return bool(wait_readable([fd], seconds))
    finally:
        os.close(fd)
