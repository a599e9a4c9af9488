"""The same worker with the three-line fix: a set holds every task until it is done."""

from __future__ import annotations

from examples.asyncio_worker.worker import system

SYSTEM = system("examples.asyncio_worker.fixed:SYSTEM", keep_references=True)
