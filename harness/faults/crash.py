"""``crash``: SIGKILL at a boundary hit, then a fresh process on the same database.

Two or more crash steps in one case (``crash@a#1+crash@b#1``) are the SPEC's
``crash_during_recovery``: each crash lands in the incarnation that recovers from the last.
"""

from __future__ import annotations

from harness.engine._boundary import Arm
from harness.engine._case import CaseContext
from harness.engine.schedule import Step
from harness.engine.supervisor import OutcomeKind
from harness.faults._spec import FaultSpec, not_reached, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    worker = ctx.spawn([Arm(boundary, hit)])
    outcome = ctx.wait(worker)
    crash = ctx.crash_event(worker, step)
    if crash is not None:
        how = "killed" if outcome.kind is OutcomeKind.CRASHED_AS_PLANNED else "process killed"
        ctx.landed(
            step, f"{worker.name} {how} at {boundary}#{hit} (pid {crash.pid})", worker=worker
        )
    elif outcome.ended_normally:
        not_reached(ctx, step, worker)


FAULT = FaultSpec(
    id="crash",
    summary="SIGKILL at a boundary hit, then a fresh process on the same database",
    needs_boundary=True,
    run=run,
)
