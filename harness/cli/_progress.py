"""How far a run has got: a ``[N/M]`` counter on each case line, a live status line on a
terminal, and explore's heartbeat.

A long sweep that prints a bare line per case leaves the user guessing how long is left, and
an explore prints nothing until it is done. So each case line carries ``[N/M]`` (when the
plan's size is known), and when stdout and stderr are both terminals a status line on stderr,
redrawn in place after every case, says ``N/M``, the time elapsed and an estimate of what is
left. Anywhere else (CI logs, pipes, files) there is no live line and no control character at
all: the plain line per case is the progress.

The status line is redrawn when a case ends, never from a timer thread: the campaign forks
jobs and workers, and a thread holding stderr's lock at a fork would leave the child unable
to write. For the same reason explore's heartbeat is checked on a monotonic clock when a
schedule ends, not slept for.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.cli import _style

#: seconds between explore heartbeats; the environment variable exists for the tests
HEARTBEAT_ENV = "CRASH_HARNESS_HEARTBEAT_S"
HEARTBEAT_S = 5.0

#: the progress whose live line is on screen, so an error path can take it down first
_active: Progress | None = None


def clear_live() -> None:
    """Take the live line off the screen (before an error or interrupt message)."""
    if _active is not None:
        _active.clear()


def live_enabled() -> bool:
    """Whether to draw a live line: stdout and stderr are both terminals (see ``_style``)."""
    return _style.is_terminal(sys.stdout) and _style.is_terminal(sys.stderr)


def duration(seconds: float) -> str:
    """``4.2s``, ``3m07s``, ``1h02m``: short enough for a status line."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Cases finished against cases planned, since the run began.

    ``total`` may be unknown at first (a sweep learns its plan from its dry run) and may grow
    (a depth-2 sweep plans second crashes from the first ones): ``plan`` adds to it.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        global _active
        self.label = label
        self.total = total
        self.done = 0
        self.counts: dict[str, int] = {}
        self.live = live_enabled() if live is None else live
        self._clock = clock
        self.started = clock()
        self._drawn = False
        self.extra = ""  # what explore adds to the live line
        #: how the live line names gap verdicts (explore counts landings instead: None)
        self.gap_word: str | None = "GAP"
        if self.live:
            _active = self

    def plan(self, more: int) -> None:
        """``more`` cases were added to the plan."""
        self.total = (self.total or 0) + more

    def elapsed(self) -> float:
        return self._clock() - self.started

    def advance(self, verdict: str) -> None:
        """One more case ended with ``verdict``."""
        self.done += 1
        self.counts[verdict] = self.counts.get(verdict, 0) + 1

    def counter(self) -> str:
        """``[ 3/12]`` for the case just finished, padded so the column stays put; empty when
        the total is unknown."""
        if not self.total:
            return ""
        width = len(str(self.total))
        return f"[{self.done:>{width}}/{self.total}]"

    def status(self) -> str:
        """The live line's text: ``certify 3/12 · 4.2s · ~9.8s left · 2 ok · 1 FAIL``; what
        matters most comes first, since a line wider than the terminal is cut at its end."""
        elapsed = self.elapsed()
        parts = [f"{self.label} {self.done}/{self.total}" if self.total else self.label]
        parts.append(duration(elapsed))
        if self.total and 0 < self.done < self.total:
            left = elapsed / self.done * (self.total - self.done)
            parts.append(f"~{duration(left)} left")
        words = [("pass", "ok"), ("fail", "FAIL")]
        if self.gap_word:
            words.append(("gap", self.gap_word))
        for value, word in words:
            if self.counts.get(value):
                parts.append(_style.verdict(f"{self.counts[value]} {word}", value))
        undecided = self.counts.get("unknown", 0) + self.counts.get("flaky", 0)
        if undecided:
            parts.append(_style.verdict(f"{undecided} inconclusive", "unknown"))
        if self.extra:
            parts.append(self.extra)
        return " · ".join(parts)

    def clear(self) -> None:
        """Erase the live line (if drawn), so ordinary lines print where it was."""
        if self._drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._drawn = False

    def draw(self) -> None:
        """(Re)draw the live line on stderr; a no-op off a terminal."""
        if not self.live:
            return
        width = shutil.get_terminal_size((80, 24)).columns - 1
        text = self.status()
        if _visible_len(text) > width:  # a wrapped line cannot be redrawn in place
            text = _strip(text)[: max(0, width - 1)] + "…"
        sys.stderr.write("\r" + text + "\x1b[K")
        sys.stderr.flush()
        self._drawn = True

    @contextlib.contextmanager
    def above(self) -> Iterator[None]:
        """Print ordinary lines inside this block: the live line is taken down first and
        drawn again, updated, below them."""
        self.clear()
        try:
            yield
        finally:
            sys.stdout.flush()
            self.draw()

    def close(self) -> None:
        """The run is over: the live line goes for good."""
        global _active
        self.clear()
        self.live = False
        if _active is self:
            _active = None


def _strip(text: str) -> str:
    """``text`` without SGR codes."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _visible_len(text: str) -> int:
    return len(_strip(text))


def heartbeat_interval() -> float:
    """Seconds between explore heartbeats (``CRASH_HARNESS_HEARTBEAT_S``, else 5)."""
    try:
        value = float(os.environ.get(HEARTBEAT_ENV, HEARTBEAT_S))
    except ValueError:
        return HEARTBEAT_S
    return value if value >= 0 else HEARTBEAT_S


class Heartbeat:
    """What an explore has done so far, said every few seconds.

    Off a terminal, a line at most every ``interval`` seconds (checked when a schedule ends)
    with the schedules tried, how many landed, how many failed and the shortest failure so
    far; on a terminal the same goes in the live line after every schedule instead.
    """

    def __init__(
        self,
        progress: Progress,
        *,
        interval: float | None = None,
        emit: Callable[[str], None] = _style.echo,
    ) -> None:
        self.progress = progress
        self.interval = heartbeat_interval() if interval is None else interval
        self._emit = emit
        self._last = progress.started
        progress.gap_word = None  # a drawn schedule that did not land is no gap in a plan
        self.landed = 0
        self.failed = 0
        self.best: Any = None  # the shortest failing CaseResult so far

    def seen(self, case: Any) -> None:
        """One more schedule ended (a ``CaseResult``)."""
        self.progress.advance(case.verdict.value)
        if case.all_landed:
            self.landed += 1
        if case.verdict.value == "fail":
            self.failed += 1
            if self.best is None or len(case.spec.steps) < len(self.best.spec.steps):
                self.best = case
        self.progress.extra = " · ".join(
            t for t in (f"{self.landed} landed", self._best_text()) if t
        )
        self.progress.label = f"explore: {self.progress.done} schedule(s) tried"
        if self.progress.live:
            return  # the live line says it all, after every schedule
        now = self.progress._clock()
        if now - self._last >= self.interval:
            self._last = now
            self._emit(self.line())

    def _best_text(self) -> str:
        if self.best is None:
            return ""
        steps = len(self.best.spec.steps)
        return f"shortest failure {self.best.spec.id} ({steps} step{'s' if steps != 1 else ''})"

    def line(self) -> str:
        """``  ... 12.3s: 37 schedule(s) tried, 35 landed, 2 failed; shortest failure ID``"""
        failed = _style.verdict(f"{self.failed} failed", "fail") if self.failed else "0 failed"
        text = (
            f"  ... {duration(self.progress.elapsed())}: {self.progress.done} schedule(s)"
            f" tried, {self.landed} landed, {failed}"
        )
        best = self._best_text()
        return f"{text}; {best}" if best else text
