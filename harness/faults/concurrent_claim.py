"""``concurrent_claim``: two or more workers race for the same queue (``:N`` workers, default 2).

Each worker is held right after its first claim until all have claimed, then all are let go
together, so the race is real every time rather than when the scheduler happens to allow it.
"""

from __future__ import annotations

from harness._boundary import Arm
from harness._case import CaseContext
from harness.errors import BadInputError
from harness.faults._spec import FaultSpec
from harness.schedule import Step


def run(ctx: CaseContext, step: Step) -> None:
    try:
        count = int(step.arg) if step.arg else 2
    except ValueError:
        raise BadInputError(f"{step}: ':{step.arg}' is not a number of workers") from None
    if count < 2:
        raise BadInputError(f"{step}: a race needs at least 2 workers")
    workers = []
    for _ in range(count):
        worker = ctx.spawn([Arm("after_claim", 1, "pause")])
        workers.append((worker, ctx.wait_paused(worker)))
    for worker, paused in workers:
        if paused is not None:
            ctx.release(worker)
    for worker, _ in workers:
        ctx.wait(worker)
    ctx.record("race", workers=[w.name for w, _ in workers])


FAULT = FaultSpec(
    id="concurrent_claim",
    summary="two or more workers race for the same queue, released together after claiming",
    needs_boundary=False,
    run=run,
    arg_help="number of workers (default 2)",
)
