"""``clock_jump``: while a worker holds at a boundary, every clock moves past the key's window.

The default jump is the provider's dedupe window plus a minute (``:SECONDS`` to choose). A
retry after the jump reuses a key the provider has forgotten: a correct worker reconciles or
goes to ``review``; a worker that resends anyway delivers twice.
"""

from __future__ import annotations

from harness._boundary import Arm
from harness._case import CaseContext
from harness.errors import BadInputError
from harness.faults._spec import FaultSpec, not_reached, place
from harness.schedule import Step


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    try:
        seconds = float(step.arg) if step.arg else ctx.base_config.key_window_s + 60.0
    except ValueError:
        raise BadInputError(f"{step}: ':{step.arg}' is not a number of seconds") from None
    worker = ctx.spawn([Arm(boundary, hit, "pause")])
    if ctx.wait_paused(worker) is None:
        ctx.wait(worker)
        not_reached(ctx, step, worker)
        return
    ctx.advance_clock(seconds, reason="clock_jump")
    ctx.landed(step, f"{worker.name} held at {boundary}#{hit}; clocks moved {seconds:g}s")
    ctx.release(worker)
    ctx.wait(worker)


FAULT = FaultSpec(
    id="clock_jump",
    summary="move every clock past the key's dedupe window while a worker holds at a boundary",
    needs_boundary=True,
    run=run,
    arg_help="seconds to jump (default: the key window + 60)",
)
