"""Mutant ``no_watchdog``: delivers correctly, but nothing watches for work that stops moving.

Every error counter stays at zero while the event loop is stalled: "a worker that never ran
has an error rate of zero". Found while building the liveness faults; the harness must flag
the silence itself (``liveness``: an injected stall nobody noticed).
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.async_delivery import Watchdog
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class _Silent(Watchdog):
    def start(self) -> None:
        """Never watches."""

    def stop(self) -> None:
        """Nothing to stop."""


class NoWatchdogWorker(ReferenceWorker):
    """Has no watchdog: a stalled loop goes unnoticed."""

    def watchdog(self) -> Watchdog:
        return _Silent(self)


def system() -> System:
    return mutant_system(
        "no_watchdog",
        NoWatchdogWorker,
        expected_violation="liveness",
        catching_scenario="mutant-no-watchdog",
    )
