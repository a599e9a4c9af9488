"""``deploy``: a deploy reaches the worker at a boundary: its stop signal, a grace period,
SIGKILL of what is left, and then the *next* version resumes the work on the same database.

The most common restart in production is no crash: Kubernetes, systemd or a platform sends
SIGTERM, waits ``terminationGracePeriodSeconds`` (``[worker] stop_grace_s`` here, 10 s by
default) and SIGKILLs what is left, and the pod that takes over runs the new code
(``[worker] next``; the same system when none is named), after its migration
(``[worker] prepare_next``). A worker whose SIGTERM handler finishes the send at hand within
the grace leaves nothing half done; one that ignores it is killed mid-send; a Python worker
with no handler dies at once, as from a crash. What the next version does with what the
old one left (an outbox row in a status it renamed, a key it now derives otherwise) is what
the invariants judge, across both versions.
"""

from __future__ import annotations

import re

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.faults._spec import FaultSpec, held_at, place


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    worker = held_at(ctx, step)
    if worker is None:
        return
    old = _shown(ctx.system.name)
    outcome = ctx.deploy(worker, reason=f"deploy at {boundary}#{hit}")
    how = outcome.note or outcome.kind.value
    if ctx.next_system is None:
        then = "the same version starts again"
    else:
        then = f"version {ctx.version} ({_shown(ctx.system.name)}) takes over from {old}"
    ctx.landed(step, f"{worker.name} deployed away at {boundary}#{hit}: {how}; {then}")


def _shown(name: str) -> str:
    """A system's name without the environment a ``cmd:`` one is given (its templates are
    in the scenario, and the same for both versions)."""
    if not name.startswith("cmd:"):
        return name
    words = name[len("cmd:") :].split(" ")
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    return "cmd:" + " ".join(words)


FAULT = FaultSpec(
    id="deploy",
    summary="stop signal at a boundary, grace, SIGKILL; the next version takes over",
    needs_boundary=True,
    run=run,
)
