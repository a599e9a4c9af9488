"""The values a command line may hold, declared once for every command (click types).

Each refuses what the harness would otherwise pass on to run: a NaN deadline, a seed the
report cannot carry back to ``--seed``, a port no socket has.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

#: a seed every command and scenario file accepts, and a report prints back as it was given
SEED = click.IntRange(0, 2**63 - 1)


if TYPE_CHECKING:  # generic in click's own types; not subscriptable at run time before 8.2
    _FloatType = click.ParamType[float]
else:
    _FloatType = click.ParamType


class Seconds(_FloatType):
    """A finite number of seconds, above ``low`` and at most ``high``."""

    name = "seconds"

    def __init__(self, low: float, high: float) -> None:
        self.low = low
        self.high = high

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"expected a number of seconds, found {value!r}", param, ctx)
        if not math.isfinite(number) or not self.low < number <= self.high:
            self.fail(
                f"expected seconds above {self.low:g} and at most {self.high:g}, found {value!r}",
                param,
                ctx,
            )
        return number


#: how long one worker may run before it is reported hung
WORKER_DEADLINE = Seconds(0, 86400)


def report_dir(path: Path) -> Path:
    """``--report-dir``, checked before any case runs: a folder we may write in, or one we
    may make (a run that could not write its report at the end would have run for nothing).
    Nothing is left behind by the check: bad input elsewhere must leave no trace."""
    from harness.engine.store import _paths

    return _paths.writable_dir(path, "--report-dir")
