"""Mutant ``fire_and_forget_task``: creates each delivery task and keeps no reference to it.

From the seed article's comments: sending moved into a background task, and "Python garbage
collected the task because nothing held a strong reference to it. No exception. No restart."
The delivery row sits pending and the worker simply never runs it. The fix, in the reference,
is a set that holds every task and a done-callback that discards it.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.async_delivery import AsyncDelivery
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class FireAndForgetWorker(ReferenceWorker):
    """Schedules delivery tasks without holding them; the collector may take them."""

    def async_delivery(self) -> AsyncDelivery:
        return AsyncDelivery(self, keep_references=False)


def system() -> System:
    return mutant_system(
        "fire_and_forget_task",
        FireAndForgetWorker,
        expected_violation="liveness",
        catching_scenario="mutant-fire-and-forget-task",
    )
