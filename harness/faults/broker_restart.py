"""``broker_restart``: the worker's Redis broker restarts while a worker is at a boundary.

The worker is held at the boundary hit, the broker (the Redis the harness started for the
campaign: ``[broker]``) shuts down as Redis does on SIGTERM, which fsyncs an append-only
file and keeps nothing else, and starts again on the same directory and port; then the
worker goes on, on connections that are gone. A broker without persistence (``none``: no
AOF, no snapshot, as a Redis configured as a cache runs) comes back empty: every job that
lived only in it is gone, and a worker that trusted the broker to hold its work loses it
(``no_silent_loss``). With ``aof`` the jobs come back. An exit of the worker after the
restart is restarted, as its supervisor would.
"""

from __future__ import annotations

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process import _redis_server
from harness.faults._spec import FaultSpec, held_at, let_go_expecting_exit, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    broker = _redis_server.owning(ctx.base_config.broker_url)
    if broker is None:  # validated before any case: a campaign with this step has one
        raise RuntimeError(f"{step}: the scenario has no [broker] for the harness to restart")
    worker = held_at(ctx, step)
    if worker is None:
        return
    held = broker.keys()
    down_s = broker.restart()
    kept = broker.keys()
    ctx.record(
        "broker_restart", boundary=boundary, hit=hit, down_s=round(down_s, 3), keys=[held, kept]
    )
    outcome = let_go_expecting_exit(ctx, worker, f"the broker restarted at {boundary}#{hit}")
    ctx.landed(
        step,
        f"broker restarted ({broker.persistence} persistence, {down_s:.2f}s down; {held} key(s)"
        f" before, {kept} after) while {worker.name} was at {boundary}#{hit};"
        f" {worker.name} then {outcome.kind.value}",
    )


FAULT = FaultSpec(
    id="broker_restart",
    summary="restart the campaign's Redis broker ([broker]) at a boundary",
    needs_boundary=True,
    run=run,
)
