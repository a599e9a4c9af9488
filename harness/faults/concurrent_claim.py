"""``concurrent_claim``: two or more workers race for the same queue (``:N`` workers, default 2).

Each worker is held right after its first claim, and all are let go together, so the race is
real every time rather than when the scheduler happens to allow it. A worker that finds
nothing it may claim (every due item is leased by a rival) cannot reach that point, so the
followers get a window and then the others are released anyway. The window scales with how
long the leader took to start and claim (``FOLLOWER_SLACK`` times that, at least
``RACE_WINDOW_S``): on a loaded machine a follower's start is as slow as the leader's was, and
a fixed window would call a slow start "no race".
"""

from __future__ import annotations

import time

from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import RunningWorker, WorkerEvent
from harness.errors import BadInputError
from harness.faults import _args
from harness.faults._spec import FaultSpec

#: how long a follower gets to make its first claim while the others hold theirs (wall s)
RACE_WINDOW_S = 0.3
#: a follower's window as a multiple of the leader's own time from start to first claim
FOLLOWER_SLACK = 4.0
#: the most racers a case may start (each is a real process on a small machine)
MAX_RACERS = 8


def _check(arg: str) -> int:
    return _args.count(arg, minimum=2, maximum=MAX_RACERS, what="a number of racing workers")


def run(ctx: CaseContext, step: Step) -> None:
    try:
        count = _check(step.arg) if step.arg else 2
    except _args.ArgError as exc:  # validate_cases refuses these before any case runs
        raise BadInputError(f"{step}: {exc}") from None
    started = time.monotonic()
    leader = ctx.spawn([Arm("after_claim", 1, "pause")])
    firsts = _first_pause(ctx, [leader], ctx.worker_deadline_s)
    window = max(RACE_WINDOW_S, FOLLOWER_SLACK * (time.monotonic() - started))
    followers = [ctx.spawn([Arm("after_claim", 1, "pause")]) for _ in range(count - 1)]
    firsts += _first_pause(ctx, followers, min(window, ctx.worker_deadline_s))
    workers = list(zip([leader, *followers], firsts, strict=True))
    holding = [w.name for w, e in workers if e is not None and e.kind == "paused"]
    if len(holding) >= 2:
        ctx.landed(step, f"{', '.join(holding)} held their first claims at once, then let go")
    for worker, paused in workers:
        if paused is not None and paused.kind == "paused":
            ctx.release(worker)
    # Watch every racer at once: a follower that claimed after the window holds at its
    # boundary, and another may be waiting for its lease; release each as it pauses.
    alive = [w for w, _ in workers]
    while alive:
        got = ctx.supervisor.next_event(alive, timeout_s=ctx.worker_deadline_s)
        if got is None:  # nothing moved in a whole deadline: each is reported hung
            for worker in alive:
                ctx.wait(worker)
            break
        worker, event = got
        if event is None:
            ctx.wait(worker)
            alive.remove(worker)
        elif event.kind == "paused":
            ctx.release(worker)
    ctx.record("race", workers=[w.name for w, _ in workers], holding=holding)
    if len(holding) < 2:
        ctx.not_landed(
            step,
            f"only {len(holding)} of {count} workers reached after_claim#1 while the others"
            " held theirs: there was no race",
        )


def _first_pause(
    ctx: CaseContext, workers: list[RunningWorker], window_s: float
) -> list[WorkerEvent | None]:
    """Each worker's pause at its first claim, watched together for ``window_s``, in the order
    given; None for a worker that ended or had not paused by then."""
    paused: list[WorkerEvent | None] = [None] * len(workers)
    waiting = list(workers)
    deadline = time.monotonic() + window_s
    while waiting:
        got = ctx.supervisor.next_event(waiting, timeout_s=max(0.0, deadline - time.monotonic()))
        if got is None:
            break
        worker, event = got
        if event is not None and event.kind == "overdue_flagged":
            continue
        paused[next(i for i, w in enumerate(workers) if w is worker)] = event
        waiting.remove(worker)
    return paused


FAULT = FaultSpec(
    id="concurrent_claim",
    summary="two or more workers race for the same queue, released together after claiming",
    needs_boundary=False,
    run=run,
    arg_help=f"number of workers, 2 to {MAX_RACERS} (default 2)",
    check_arg=_check,
)
