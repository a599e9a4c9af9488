"""Colour and terminal decisions for the CLI's own output, made in one place.

Every printed verdict asks this module whether to colour, so ``--color``, ``NO_COLOR`` and
``FORCE_COLOR`` mean the same thing on every command. The rule, first match wins:

1. ``--color=always`` colours and ``--color=never`` does not: a flag given for this one run
   is the user's latest word, so it beats the environment (as pytest's ``--color=yes`` and
   the no-color.org convention have it);
2. ``--color=auto`` (the default): ``NO_COLOR`` set to anything non-empty turns colour off;
3. ``FORCE_COLOR`` set to anything non-empty (but ``0``) turns it on;
4. otherwise colour only when stdout is a terminal (and ``TERM`` is not ``dumb``).

Only what goes to the terminal is ever coloured: reports on disk are rendered from the
report's JSON by ``harness.reports`` and never pass through here.

The live status line (``harness.cli._progress``) is a terminal matter, not a colour one: it is
drawn only when stdout and stderr are both terminals, whatever ``--color`` says, because its
carriage returns would garble a log file just as colour codes would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Literal, TextIO

import click

ColorChoice = Literal["auto", "always", "never"]
CHOICES: tuple[ColorChoice, ...] = ("auto", "always", "never")

#: SGR codes; bold for the words a reader's eye should land on
GREEN = "32"
RED = "1;31"
YELLOW = "33"
DIM = "2"

#: a case verdict -> its colour: pass green, fail red, anything undecided yellow
VERDICT_COLOURS: dict[str, str] = {
    "pass": GREEN,
    "fail": RED,
    "unknown": YELLOW,
    "gap": YELLOW,
    "flaky": YELLOW,
}

#: what the last ``--color`` said; the top-level group resets it on every invocation
_choice: ColorChoice = "auto"


def set_choice(choice: ColorChoice) -> None:
    """Record ``--color`` for the rest of this invocation."""
    global _choice
    _choice = choice


def choice() -> ColorChoice:
    return _choice


def is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal that understands control codes."""
    if stream is None or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def colour_enabled() -> bool:
    """Whether output to stdout gets colour now (see the module docstring for the rule)."""
    if _choice != "auto":
        return _choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "0") not in ("", "0"):
        return True
    return is_terminal(sys.stdout)


def paint(text: str, colour: str | None, *, enabled: bool | None = None) -> str:
    """``text`` wrapped in the SGR ``colour`` when colour is on, else ``text`` unchanged."""
    if colour is None or not (colour_enabled() if enabled is None else enabled):
        return text
    return f"\x1b[{colour}m{text}\x1b[0m"


def verdict(text: str, value: str) -> str:
    """``text`` (a mark such as ``FAIL``) in the colour of the case verdict ``value``."""
    return paint(text, VERDICT_COLOURS.get(value))


def status_colour(status: int) -> str:
    """The colour of a campaign's exit status: 0 green, 1 (violation, gap) red, else yellow."""
    return {0: GREEN, 1: RED}.get(int(status), YELLOW)


def echo(text: str, *, err: bool = False) -> None:
    """``click.echo`` that keeps the codes ``paint`` added: click strips them from a pipe on
    its own, which would make ``--color=always`` and ``FORCE_COLOR`` mean nothing."""
    click.echo(text, err=err, color=True if colour_enabled() else None)


def _take_choice(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        set_choice(value)  # type: ignore[arg-type]  # click.Choice checked it


def color_option(*, default: ColorChoice | None = None) -> Callable[[Any], Any]:
    """The ``--color`` option: the top-level group gives it a default (so each invocation
    starts from ``auto``), a sub-command none (so it changes the choice only when given)."""
    return click.option(
        "--color",
        type=click.Choice(CHOICES),
        default=default,
        show_default=default is not None,
        expose_value=False,
        is_eager=True,
        callback=_take_choice,
        help="Colour verdicts: auto (when stdout is a terminal and NO_COLOR is unset),"
        " always or never.",
    )
