"""``db_restart``: the database server restarts while a worker is at a boundary.

The worker is held at the boundary hit, the server is stopped the way an operator's restart
(or a managed database's failover) stops it, PostgreSQL's fast shutdown, which ends every
session, and started again on the same data; then the worker goes on, on connections that
are gone. What is tested is the worker's own handling: a pool that reconnects, a transaction
retried, or a process that exits and is started again by its supervisor (the harness starts
a fresh worker after an exit here, as systemd or Kubernetes would). Nothing the worker wrote
before the restart is lost (committed work survives a fast shutdown); what the provider
accepted stays accepted.

Only a server the harness made for the campaign is ever restarted
(``harness.engine.process._pg_cluster``); SQLite has no server and is refused before any case.
"""

from __future__ import annotations

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process import _pg_cluster
from harness.faults._spec import FaultSpec, held_at, let_go_expecting_exit, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    server = _pg_cluster.owning(ctx.target.url)
    if server is None:  # validated before any case: a campaign with this step makes one
        raise RuntimeError(f"{step}: the case's database is no server the harness started")
    worker = held_at(ctx, step)
    if worker is None:
        return
    down_s = server.restart()
    ctx.record("db_restart", boundary=boundary, hit=hit, down_s=round(down_s, 3))
    outcome = let_go_expecting_exit(
        ctx, worker, f"the database server restarted at {boundary}#{hit}"
    )
    ctx.landed(
        step,
        f"database server restarted (fast shutdown, {down_s:.2f}s down) while {worker.name}"
        f" was at {boundary}#{hit}; {worker.name} then {outcome.kind.value}",
    )


FAULT = FaultSpec(
    id="db_restart",
    summary="restart the database server (a throwaway one the harness made) at a boundary",
    needs_boundary=True,
    run=run,
)
