"""How an incarnation ended: its wait status, its trace and the harness's own record, weighed.

The one judgement the supervisor makes, and the one a wrong verdict would come from: a
SIGKILL counts as a planned crash only when every crash line of the worker matches an arm
the harness set or a kill it made itself (the supervisor's docstring says the whole rule).
Kept apart from forking and killing so that the rule reads in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from harness.engine.process._outcome import OutcomeKind, WorkerOutcome
from harness.engine.process._running import RunningWorker
from harness.engine.process._tail import read_tail
from harness.engine.store import _secrets, trace

#: how much of a worker's stderr a report carries (its end, in bytes); the harness never
#: reads more of it than this, however much a worker prints: the whole file stays in the
#: work dir
STDERR_TAIL_BYTES = 4000


def classify(
    worker: RunningWorker,
    status: int,
    events: list[trace.TraceEvent],
    ended: float,
    stack_dump: str | None,
) -> WorkerOutcome:
    """The outcome of a reaped worker: ``status`` its wait status, ``events`` its case's
    trace (read only for a death by signal), ``stack_dump`` what it wrote after SIGABRT
    when it outlived its deadline (None otherwise)."""
    common = _quoted_output(worker, ended, stack_dump)
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
    if worker.stopped_by is not None and not _crash_came_first(worker, status, events):
        # the harness asked it to end; however it ended
        if worker.stop_dump is not None:  # it outlived its grace: where it was stuck
            common["stack_dump"] = _secrets.scrub(worker.stop_dump)
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
    return _killed_by(worker, os.WTERMSIG(status), events, common)


def _crash_came_first(worker: RunningWorker, status: int, events: list[trace.TraceEvent]) -> bool:
    """A SIGKILL the stop did not send (it sent its own signal, with no SIGKILL after the
    grace) to a worker one of whose processes had traced a crash: the planned crash, under
    way when the stop was sent, ended it, and the crash is what it is classified by."""
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        return False
    if "SIGKILL" in (worker.stopped_by or "") or worker.stopped_by == "SIGKILL":
        return False
    return any(ev.event == "crash" and ev.worker == worker.name for ev in events)


def _quoted_output(worker: RunningWorker, ended: float, stack_dump: str | None) -> dict[str, Any]:
    """What every outcome carries: who, when, and the scrubbed end of what it wrote."""
    # a worker may print its environment (the provider credential is in it): keep neither
    # the secret in its stderr file (a kept work dir) nor in what the reports quote
    with contextlib.suppress(OSError):
        _secrets.scrub_file(worker.stderr_path)
    stderr_tail = _secrets.scrub(read_tail(worker.stderr_path, STDERR_TAIL_BYTES))
    return {
        "worker": worker.name,
        "pid": worker.pid,
        "started_at": worker.started_at,
        "ended_at": ended,
        "stderr_tail": stderr_tail,
        "stack_dump": None if stack_dump is None else _secrets.scrub(stack_dump),
    }


def _killed_by(
    worker: RunningWorker, sig: int, events: list[trace.TraceEvent], common: dict[str, Any]
) -> WorkerOutcome:
    """A death by signal ``sig``: planned only if SIGKILL and every crash line was asked for."""
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


def _signame(sig: int | None) -> str | None:
    """A signal's name (``SIGKILL``), or its number for one Python has no name for."""
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
