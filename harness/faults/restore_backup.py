"""``restore_backup``: snapshot the database at a boundary, let the worker finish, restore the
snapshot, then restart.

The restored ledger has forgotten whatever happened after the snapshot, but the provider has
not. A worker that derives keys from the delivery's identity and reconciles before resending
replays nothing; one that trusts its (old) ledger sends again.
"""

from __future__ import annotations

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.store import _db
from harness.faults._spec import FaultSpec, held_at, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    worker = held_at(ctx, step)
    if worker is None:
        return
    handle = _db.snapshot(ctx.target, "snap")
    ctx.record("snapshot", boundary=boundary, hit=hit)
    ctx.release(worker)
    ctx.wait(worker)
    _db.restore(ctx.target, handle)
    last_seq = max((e.seq for e in ctx.case_effects()), default=0)
    # several providers: each numbers its own log, so each gets its own cut
    by_provider = {
        name: max(
            (e.seq for e in provider.admin.effects(epoch=ctx.provider_epochs[name])), default=0
        )
        for name, provider in ctx.providers.items()
        if name in ctx.provider_epochs
    }
    ctx.record(
        "restore",
        boundary=boundary,
        hit=hit,
        effects_seq=last_seq,
        **({"effects_seq_by_provider": by_provider} if by_provider else {}),
    )
    ctx.landed(step, f"snapshot at {worker.name}'s {boundary}#{hit}, restored after it ended")
    ctx.settled = False
    ctx.needs_gap = True  # leases in the snapshot belong to a worker that is gone


FAULT = FaultSpec(
    id="restore_backup",
    summary="snapshot the ledger at a boundary, let the worker finish, restore it, restart",
    needs_boundary=True,
    run=run,
)
