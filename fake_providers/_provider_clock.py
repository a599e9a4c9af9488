"""The provider clock: the time every record is stamped with and every window measured by.

It is either a clock file the harness moves (the epoch follows it, so provider and workers
agree to the microsecond) or wall clock plus every advance the log recorded (so a restarted
provider keeps the time it was moved to). Which one holds changes only at a new epoch.
"""

from __future__ import annotations

from collections.abc import Callable

from fake_providers._clock import FileClock


class ProviderClock:
    """The current epoch's clock. Change it under the core's lock."""

    def __init__(self, wall: Callable[[], float], offset: float, file: FileClock | None) -> None:
        self._wall = wall
        #: seconds added to wall clock (every ``/_admin/clock`` advance the log recorded)
        self.offset = offset
        #: the clock file the epoch follows, if any
        self.file = file

    def now(self) -> float:
        """The followed clock file's reading if the epoch has one, else wall clock plus
        the recorded advances."""
        if self.file is not None:
            return self.file.now()
        return self._wall() + self.offset

    def follow(self, file: FileClock | None) -> None:
        """From now on read ``file`` (None: wall clock plus offset); closes the old file."""
        if self.file is not None:
            self.file.close()
        self.file = file
