"""The worker as it was first written: ``loop.create_task(...)`` and nothing keeps the task.

``crash-harness certify --system examples.asyncio_worker.buggy:SYSTEM --case task_never_started``
fails ``liveness``: the garbage collector takes the waiting delivery tasks, no exception is
raised, the process stays up, and only the watchdog notices the messages never went out.
"""

from __future__ import annotations

from examples.asyncio_worker.worker import system

SYSTEM = system("examples.asyncio_worker.buggy:SYSTEM", keep_references=False)
