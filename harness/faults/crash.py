"""``crash``: SIGKILL at a boundary hit, then a fresh process on the same database.

Two or more crash steps in one case (``crash@a#1+crash@b#1``) are the SPEC's
``crash_during_recovery``: each crash lands in the incarnation that recovers from the last.
"""

from __future__ import annotations

import time
from typing import Any

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process import _far_side
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import OutcomeKind
from harness.faults._spec import FaultSpec, not_reached, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    if _far_side.is_far_side(boundary):
        _run_far_side(ctx, step, boundary, hit)
        return
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


def _run_far_side(ctx: CaseContext, step: Step, boundary: str, hit: int) -> None:
    """``crash@accepted.NAME#k``: the provider holds the reply to the k-th request it
    accepts from now on; when it does, the worker's whole tree is killed (a harness kill
    recorded as a crash at ``accepted.NAME#k``). Nothing in the worker is armed."""
    name = _far_side.provider_of(boundary)
    provider = ctx.provider_named(name)
    epoch = ctx.provider_epochs.get(name, ctx.provider_epoch or provider.admin.health()["epoch"])
    holder: dict[str, Any] = {}

    def on_held(said: dict[str, Any]) -> None:
        worker = holder["worker"]
        if worker.ended:
            return
        # CLOCK_MONOTONIC, the provider's clock for sender_gone_at too: taken before the
        # signal, so a sender seen gone before it closed its connection on its own
        holder["killed_at"] = time.monotonic()
        ctx.supervisor.kill(
            worker,
            trace_path=ctx.trace_path,
            reason=f"{boundary}#{hit}",
            boundary=boundary,
            hit=hit,
            provider=name,
            seq=said.get("seq"),
        )

    watch = _far_side.HoldWatch(provider, epoch=epoch, nth=hit, on_held=on_held)
    try:
        holder["worker"] = worker = ctx.spawn()  # while no watch thread is alive
        watch.start()
    except BaseException:
        watch.stop()
        raise
    try:
        outcome = ctx.wait(worker)
    finally:
        last = watch.stop()
    gave_up = _gave_up_first(last, holder.get("killed_at"))
    if watch.held is not None and ctx.crash_event(worker, step) is not None and gave_up is not None:
        # killed after the accept, but not at the point: it had stopped waiting for the
        # reply (its own timeout) and gone on, so whatever it did next ran before the crash
        ctx.not_landed(
            step,
            f"{worker.name} stopped waiting for the held reply of {name} (its own timeout)"
            " before the kill and went on: killed after the point, not at it",
        )
    elif watch.held is not None and ctx.crash_event(worker, step) is not None:
        ctx.landed(
            step,
            # the log record's number stays in the trace (the kill line's ``seq``): it counts
            # over the provider's whole log, so a rerun of the same seed numbers it otherwise
            f"{worker.name} killed with request #{hit} of {name} accepted and its reply held",
            worker=worker,
        )
    elif watch.held is not None:  # held, but the worker ended before the kill took it
        ctx.not_landed(step, f"{worker.name} ended ({outcome.kind}) before the kill at {name}")
    elif outcome.ended_normally:
        counted = int(last.get("counted") or 0)
        ctx.not_reached_far_side(step, worker, counted)


def _gave_up_first(last: dict[str, Any], killed_at: float | None) -> float | None:
    """How long before the kill the sender closed its held connection by itself (None: it
    did not, or nobody saw it): a sender that timed out and went on was not killed *at*
    the far-side point, whatever it did after."""
    gone = last.get("sender_gone_at")
    if killed_at is None or not isinstance(gone, (int, float)) or gone >= killed_at:
        return None
    return killed_at - float(gone)


FAULT = FaultSpec(
    id="crash",
    summary="SIGKILL at a boundary hit, then a fresh process on the same database",
    needs_boundary=True,
    run=run,
)
