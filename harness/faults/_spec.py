"""The shape every fault module fills in, and how a fault says whether it landed.

A planned step that did not happen is never a pass, so every fault module must say, with
evidence, that its step landed (``ctx.landed``) or why not (``ctx.not_reached``). A step that
says nothing is *unconfirmed*, which the case's verdict treats like one that never landed.
Faults whose only evidence is the provider's own log (provider faults) give a ``confirm``
that reads the effects after the case, instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import RunningWorker, WorkerOutcome
from harness.invariants._model import EffectRow

#: ``confirm(ctx, step, index, effects)`` -> (landed, evidence)
Confirm = Callable[[CaseContext, Step, int, Sequence[EffectRow]], tuple[bool, str]]


@dataclass(frozen=True)
class FaultSpec:
    """A fault: how to set it up before workers start, and how to drive the workers."""

    id: str
    summary: str
    #: whether the step must name a boundary and hit (``fault@boundary#hit``)
    needs_boundary: bool
    run: Callable[[CaseContext, Step], None]
    #: runs before any worker starts (provider rules, ...)
    prepare: Callable[[CaseContext, Step], None] | None = None
    #: what ``:ARG`` means for this fault, if anything
    arg_help: str | None = None
    #: decides landing from the provider's effect log after the case (provider faults)
    confirm: Confirm | None = None
    #: parses ``:ARG`` and raises ``ArgError`` when it is malformed or out of range; None:
    #: the fault takes no argument (``validate_cases`` refuses one)
    check_arg: Callable[[str], object] | None = None
    #: whether the step may name the provider it hits (``fault@PROVIDER``): a provider fault
    names_provider: bool = False


def not_reached(ctx: CaseContext, step: Step, worker: RunningWorker) -> None:
    """The armed hit never came on ``worker``: the step did not land."""
    ctx.not_reached(step, worker)


def held_at(ctx: CaseContext, step: Step) -> RunningWorker | None:
    """A fresh worker, held at the step's boundary hit; None when the hit never came (the
    worker ran to its end and the step is recorded not reached). What every fault that acts
    on the world while a worker waits at a boundary starts with."""
    boundary, hit = place(step)
    worker = ctx.spawn([Arm(boundary, hit, "pause")])
    if ctx.wait_paused(worker) is None:
        ctx.wait(worker)
        not_reached(ctx, step, worker)
        return None
    return worker


def let_go_expecting_exit(ctx: CaseContext, worker: RunningWorker, because: str) -> WorkerOutcome:
    """Release a held worker from under which something was taken (``because``: its
    database server, its broker) and wait for it: an exit of it is then normal, and it is
    restarted as after a crash."""
    ctx.exit_expected_because = because
    try:
        ctx.release(worker)
        return ctx.wait(worker)
    finally:
        ctx.exit_expected_because = None


def place(step: Step) -> tuple[str, int]:
    """The boundary and hit of a step that needs one (validated before any case runs)."""
    if step.boundary is None or step.hit is None:
        raise ValueError(f"{step}: this fault needs @BOUNDARY#HIT")
    return step.boundary, step.hit
