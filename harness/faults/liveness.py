"""Liveness faults: the worker stays up but stops delivering, and no exception says so.

- ``task_never_started``: the asyncio delivery tasks are scheduled, then the garbage
  collector runs (at a moment the harness picks). A worker that holds its tasks strongly
  loses nothing; one that fires and forgets them loses them silently.
- ``loop_stall``: the event loop stops making progress while the process stays alive.

Either way the check is on the absence of success: the harness waits for the worker's
watchdog to flag an overdue delivery (on the events pipe, not by sleeping), records the
detection time, then kills the silent worker and lets a fresh one finish the job.
"""

from __future__ import annotations

from dataclasses import replace

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process._boundary import Arm
from harness.faults._spec import FaultSpec

#: the boundary the asyncio path reaches once every new task waits for a sending slot
SCHEDULED = "delivery_tasks_scheduled"


def _watch(ctx: CaseContext, step: Step, *, action: str) -> None:
    worker = ctx.spawn([Arm(SCHEDULED, 1, action)])
    first = ctx.supervisor.wait_event(worker, timeout_s=ctx.worker_deadline_s, quiet_ok=True)
    if first is None:
        ctx.wait(worker)  # it ended, or it is reported hung with its stack
        ctx.notes.append(f"{step}: the worker never reached {SCHEDULED} (no asyncio path?)")
        return
    ctx.record("liveness_fault", fault=step.fault, expect_overdue=step.fault == "loop_stall")
    expected = "paused" if action == "pause" else "hung"
    if first.kind == expected and first.subject == SCHEDULED:
        how = "tasks collected" if action == "pause" else "event loop stalled"
        ctx.landed(step, f"{worker.name} at {SCHEDULED}: {how}")
    else:
        ctx.not_landed(step, f"{worker.name} said {first.kind} {first.subject}, not {expected}")
    if first.kind == "paused":
        ctx.release(worker, "gc")
    # A watchdog that has not spoken after ten grace periods is not going to.
    budget = 10 * ctx.base_config.liveness_grace_s + 2.0
    # A stalled loop is replaced as soon as its watchdog speaks. After the collection a
    # correct worker goes on: a flag there may be a busy machine, so the worker is left to
    # finish, and only work that then goes nowhere (no word for the budget, or a flagged
    # delivery never settled) counts as dropped.
    stalled = action == "hang"
    ctx.watch(worker, injected_at=first.at, budget_s=budget, kill_when_flagged=stalled)


def _asyncio_path(ctx: CaseContext, step: Step) -> None:
    """Both faults live in the asyncio delivery path; under them (and only them) a worker
    whose watchdog flags overdue work is killed and replaced, by the fresh workers too."""
    ctx.base_config = replace(ctx.base_config, delivery_mode="asyncio")
    ctx.replace_flagged_workers = True


def _task_never_started(ctx: CaseContext, step: Step) -> None:
    _watch(ctx, step, action="pause")


def _loop_stall(ctx: CaseContext, step: Step) -> None:
    _watch(ctx, step, action="hang")


FAULTS = (
    FaultSpec(
        id="task_never_started",
        summary="asyncio delivery tasks scheduled, then collected: no exception, process up",
        needs_boundary=False,
        run=_task_never_started,
        prepare=_asyncio_path,
    ),
    FaultSpec(
        id="loop_stall",
        summary="the event loop stops making progress while the process stays alive",
        needs_boundary=False,
        run=_loop_stall,
        prepare=_asyncio_path,
    ),
)
