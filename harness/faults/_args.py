"""Fault arguments (the ``:ARG`` of a case step): parsed and range-checked in one place.

A case id is the whole truth about a case, so an argument must mean one thing and be refused
before anything runs when it means nothing: ``validate_cases`` calls each fault's
``check_arg``, and an ``ArgError`` becomes bad input (exit 2) naming the case, the step, what
was expected and what was found. The fault's ``run``/``prepare`` parse the same text again
with the same function, so what was checked is what runs.
"""

from __future__ import annotations

import re
from typing import Final

#: seconds per duration unit
_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: a plain decimal number and an optional unit: no sign, no exponent, no nan or inf
_DURATION = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<unit>[smhd]?)$")

DURATION_HELP: Final = "a duration: a number with s, m, h or d (61s, 30m, 25h, 3d)"


class ArgError(ValueError):
    """A step's argument is malformed or out of range: what was expected, what was found."""

    def __init__(self, expected: str, found: str) -> None:
        super().__init__(f"expected {expected}, found {found!r}")
        self.expected = expected
        self.found = found


def duration_s(text: str, *, maximum_s: float, bare: str = "s") -> float:
    """Seconds in ``text`` (``61s``, ``30m``, ``25h``, ``3d``, ``1.5s``), in (0, maximum_s].

    A bare number is read in the ``bare`` unit (seconds, as old case ids wrote them).
    Zero, negative, NaN, infinite and absurd (past ``maximum_s``) sizes are refused.
    """
    m = _DURATION.match(text)
    if m is None:
        raise ArgError(DURATION_HELP, text)
    seconds = float(m.group("number")) * _UNITS[m.group("unit") or bare]
    if seconds <= 0:
        raise ArgError(f"{DURATION_HELP}, above zero", text)
    if seconds > maximum_s:
        raise ArgError(f"{DURATION_HELP}, at most {format_duration(maximum_s)}", text)
    return seconds


def count(text: str, *, minimum: int, maximum: int, what: str) -> int:
    """A whole number in [minimum, maximum] (``what`` says what it counts)."""
    if not text.isdigit():
        raise ArgError(f"{what}: a whole number from {minimum} to {maximum}", text)
    value = int(text)
    if not minimum <= value <= maximum:
        raise ArgError(f"{what}: a whole number from {minimum} to {maximum}", text)
    return value


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` in the duration grammar (``90000`` -> 25h)."""
    for unit in ("d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
