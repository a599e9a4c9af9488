"""``pause_past_lease``: SIGSTOP a worker until its lease has lapsed, let a rival claim the
item and finish it, then SIGCONT the first.

The first worker is held at the boundary (it says so on its events pipe: no guessing), then
stopped; the shared clock moves past the lease instead of the test waiting for it. A correct
worker's late update is fenced off by the lease epoch; a worker without leases sends again.
"""

from __future__ import annotations

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.faults._spec import FaultSpec, held_at, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    first = held_at(ctx, step)
    if first is None:
        return
    # The worker is held at the boundary by its pause, not by SIGSTOP: a stopped process also
    # freezes its watchdog thread, and on SQLite one frozen inside BEGIN IMMEDIATE blocks
    # every rival until the busy timeout (seen in CI as a "hung" rival). A real GC pause can
    # do that too; it is a different finding from the lease fencing this fault tests.
    ctx.advance_clock(ctx.base_config.lease_s + 1.0, reason="pause_past_lease")
    rival = ctx.spawn()
    ctx.wait(rival)
    ctx.landed(
        step,
        f"{first.name} held at {boundary}#{hit} past its lease while {rival.name} ran, then let go",
    )
    ctx.release(first)
    ctx.wait(first)


FAULT = FaultSpec(
    id="pause_past_lease",
    summary="SIGSTOP a worker past its lease, let a rival claim and finish, then SIGCONT",
    needs_boundary=True,
    run=run,
)
