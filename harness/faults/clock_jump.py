"""``clock_jump``: while a worker holds at a boundary, every clock moves forward.

The default jump is the provider's dedupe window plus a minute: just past the key's window. A
retry after it reuses a key the provider has forgotten: a correct worker reconciles or goes to
``review``; a worker that resends anyway delivers twice.

``:SIZE`` chooses the jump: a duration (``61s``, ``30m``, ``25h``, ``3d``; a bare number is
seconds, as old case ids wrote it), or ``inwindow`` (half the key window: a jump that stays
inside it, where a retry must still be deduplicated). Days reach past a provider's retention
period (orders keep an id for 6 to 72 hours), not only its key window.

A system that has a cleanup (a boundary named for one: ``after_cleanup``, a purge, a prune,
a retention pass) is also jumped past the retention periods people usually choose
(``RETENTION_JUMPS``: 30 days, 90 days, a year), by the built-in scenarios and by explore: a
cleanup that prunes audit rows after 30 days never runs in a campaign whose clock stops at 3.
"""

from __future__ import annotations

from typing import Final

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.errors import BadInputError
from harness.faults._args import DURATION_HELP, ArgError, duration_s
from harness.faults._spec import FaultSpec, held_at, place

#: a jump that stays inside the key window (half of it)
IN_WINDOW: Final = "inwindow"
#: the longest jump a case may ask for: past any window or retention period, short of nonsense
MAX_JUMP_S: Final = 366 * 86400.0
#: the default jump lands this far past the key window
PAST_WINDOW_S: Final = 60.0
#: jumps just past the usual retention periods: 30 days, 90 days, a year
RETENTION_JUMPS: Final = ("31d", "91d", "366d")
#: words in a boundary's name that say the system has a cleanup (``after_cleanup``)
CLEANUP_WORDS: Final = ("cleanup", "clean_up", "purge", "prune", "retention", "expire")


def cleanup_boundaries(boundaries: tuple[str, ...]) -> tuple[str, ...]:
    """The boundaries that name a cleanup: where the system has one, retention jumps matter."""
    return tuple(b for b in boundaries if any(w in b.lower() for w in CLEANUP_WORDS))


def check_arg(arg: str) -> float | None:
    """The jump ``arg`` asks for in seconds (None: ``inwindow``, known only per case)."""
    if arg == IN_WINDOW:
        return None
    try:
        return duration_s(arg, maximum_s=MAX_JUMP_S)
    except ArgError as exc:
        raise ArgError(f"{exc.expected}, or {IN_WINDOW!r}", exc.found) from None


def jump_s(arg: str | None, key_window_s: float) -> float:
    """Seconds to move every clock for ``arg`` with this key window."""
    if arg is None:
        return key_window_s + PAST_WINDOW_S
    seconds = check_arg(arg)
    return key_window_s / 2 if seconds is None else seconds


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    try:
        seconds = jump_s(step.arg, ctx.base_config.key_window_s)
    except ArgError as exc:  # validate_cases refuses these before any case runs
        raise BadInputError(f"{step}: {exc}") from None
    worker = held_at(ctx, step)
    if worker is None:
        return
    ctx.advance_clock(seconds, reason="clock_jump")
    ctx.landed(step, f"{worker.name} held at {boundary}#{hit}; clocks moved {seconds:g}s")
    ctx.release(worker)
    ctx.wait(worker)


FAULT = FaultSpec(
    id="clock_jump",
    summary="move every clock forward (past the key's dedupe window by default) while a worker"
    " holds at a boundary",
    needs_boundary=True,
    run=run,
    arg_help=f"how far to jump: {DURATION_HELP}, or {IN_WINDOW!r} (half the key window);"
    " default: the key window + 60s",
    check_arg=check_arg,
)
