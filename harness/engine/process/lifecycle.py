"""How a worker the harness did not write starts, ends and tells time.

The reference worker finishes its work and exits. A Celery, Huey or Dramatiq worker never
exits on its own; after a pool child is killed its parent may exit non-zero by design; and
its recovery runs on wall-clock timers (a visibility timeout, a heartbeat TTL) that only move
if wall time does. Each of those used to make a user write glue that knew the broker's
internals, or wait real minutes. A scenario's ``[worker]`` table says instead:

- ``daemon = true``: the case ends when the system has settled (``[settle]``), and the harness
  stops the worker the way its library documents: ``stop_signal`` (a warm shutdown), then
  SIGKILL after ``stop_grace_s``, recording which it took;
- ``exits_after_crash = [1]``: exit codes that are normal for a worker one of whose processes
  the harness killed (the worker is restarted; such an exit is no anomaly);
- ``fake_time = true``: the worker's whole process tree, and the settle hooks, run with the
  harness's clock preload, their wall clock ahead by however far the case's clock has moved
  (``restart_gap_s`` between a crash and the restart, ``clock_jump`` steps);
- ``restart_gap_s``: how far the clock moves while a crashed worker is replaced (the
  reference's lease by default).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from harness.errors import BadInputError

#: the signals a scenario may name as a worker's documented stop signal
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2")


@dataclass(frozen=True)
class Lifecycle:
    """A third-party worker's lifecycle, as its scenario describes it (defaults: the
    reference's, a worker that ends when its work is done, on the case's own clock)."""

    daemon: bool = False
    stop_signal: str = "SIGTERM"
    stop_grace_s: float = 10.0
    exits_after_crash: tuple[int, ...] = ()
    fake_time: bool = False
    restart_gap_s: float | None = None

    def __post_init__(self) -> None:
        if self.stop_signal not in STOP_SIGNALS:
            raise BadInputError(
                f"stop_signal: expected one of {', '.join(STOP_SIGNALS)}, got {self.stop_signal!r}"
            )
        for code in self.exits_after_crash:
            if not 1 <= code <= 255:
                raise BadInputError(
                    f"exits_after_crash: expected exit codes from 1 to 255, got {code!r}"
                    " (0 is a normal end already)"
                )

    @property
    def signum(self) -> signal.Signals:
        return signal.Signals[self.stop_signal]
