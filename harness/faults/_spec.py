"""The shape every fault module fills in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness._case import CaseContext
from harness.schedule import Step


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
    #: parses ``:ARG`` and raises ``ArgError`` when it is malformed or out of range; None:
    #: the fault takes no argument (``validate_cases`` refuses one)
    check_arg: Callable[[str], object] | None = None


def not_reached(ctx: CaseContext, step: Step) -> None:
    ctx.notes.append(f"{step}: boundary {step.boundary} hit {step.hit} was never reached")


def place(step: Step) -> tuple[str, int]:
    """The boundary and hit of a step that needs one (validated before any case runs)."""
    if step.boundary is None or step.hit is None:
        raise ValueError(f"{step}: this fault needs @BOUNDARY#HIT")
    return step.boundary, step.hit
