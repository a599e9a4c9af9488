"""Provider faults: the usual ways a provider fails, set on the fake before workers start.

``:N`` picks the N-th send of the case (default 1). ``provider_accept_then_drop`` records the
effect and cuts the connection before any reply: the hard case seen from the provider side.
``provider_slow:SECONDS`` (default 1.5) holds the case's first send that long *before* the
provider processes it; the hold ends after that many wall seconds or once the case clock has
moved that far, whichever comes first, so a worker that waits out its timeout and its backoff
finds the message there, as it would in real time.
"""

from __future__ import annotations

from collections.abc import Callable

from fake_providers import FaultRule
from fake_providers._records import MAX_HOLD_S
from harness._case import CaseContext
from harness.errors import BadInputError
from harness.faults._spec import FaultSpec
from harness.schedule import Step


def _nth(step: Step) -> int:
    try:
        n = int(step.arg) if step.arg else 1
    except ValueError:
        raise BadInputError(f"{step}: ':{step.arg}' is not a send number") from None
    if n < 1:
        raise BadInputError(f"{step}: send numbers start at 1")
    return n


def _rule(make: Callable[[int], FaultRule]) -> Callable[[CaseContext, Step], None]:
    def prepare(ctx: CaseContext, step: Step) -> None:
        ctx.add_provider_rule(make(_nth(step)))

    return prepare


def _nothing(ctx: CaseContext, step: Step) -> None:
    """Provider faults act through the provider; the workers run as usual."""


def _spec(fault_id: str, summary: str, make: Callable[[int], FaultRule]) -> FaultSpec:
    return FaultSpec(
        id=fault_id,
        summary=summary,
        needs_boundary=False,
        run=_nothing,
        prepare=_rule(make),
        arg_help="which send of the case (default 1)",
    )


#: longer than the harness's request timeout (1 s), so the worker gives up waiting
TIMEOUT_HOLD_S = 1.5
#: the default hold of ``provider_slow``: past the harness's request timeout too
SLOW_HOLD_S = 1.5


def _seconds(step: Step) -> float:
    try:
        seconds = float(step.arg) if step.arg else SLOW_HOLD_S
    except ValueError:
        raise BadInputError(f"{step}: ':{step.arg}' is not a number of seconds") from None
    if not 0 <= seconds <= MAX_HOLD_S:
        raise BadInputError(f"{step}: a hold is 0 to {MAX_HOLD_S:g} seconds")
    return seconds


def _slow(ctx: CaseContext, step: Step) -> None:
    ctx.add_provider_rule(FaultRule(fault="slow", delay_s=_seconds(step), nth=1))


FAULTS = (
    _spec(
        "provider_accept_then_drop",
        "the provider records the effect but the response never arrives",
        lambda n: FaultRule(fault="accept_then_drop", nth=n),
    ),
    _spec(
        "provider_timeout",
        "the provider accepts, then holds the reply past the worker's timeout",
        lambda n: FaultRule(fault="timeout", hold_s=TIMEOUT_HOLD_S, nth=n),
    ),
    FaultSpec(
        id="provider_slow",
        summary="the provider holds the first send before processing it (a slow reply)",
        needs_boundary=False,
        run=_nothing,
        prepare=_slow,
        arg_help="seconds the first send is held (default 1.5)",
    ),
    _spec(
        "provider_5xx",
        "the provider answers 503",
        lambda n: FaultRule(fault="status", status=503, nth=n),
    ),
    _spec(
        "provider_429",
        "the provider throttles with 429 and Retry-After",
        lambda n: FaultRule(fault="status", status=429, retry_after=1, nth=n),
    ),
)
