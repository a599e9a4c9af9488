"""crash-harness: prove that a crash and restart never sends a message twice or loses one.

What lives where:

- ``harness.boundary`` (from ``_boundary``): the one call a worker adds to its own code.
  Importing ``harness`` imports nothing heavy, so production code can keep the calls.
- ``harness.simple_system``, ``jobs``, ``planned_work``, ``Job``, ``LedgerAdapter``,
  ``WorkerConfig``, ``System``: plugging in your own worker (``docs/own-worker.md``); loaded
  on first use.
- ``harness.names``: canonical boundary, state and invariant names.
- ``harness.errors``: the error tree and exit statuses.
- ``harness.supervisor``: forks, arms, kills and reaps worker processes.
- ``harness.reference``: the ledger and worker that do it right; ``harness.mutants``: the
  catalogue of broken workers the harness must catch.
- ``harness.invariants``: one checker module per invariant.
- ``harness.campaign`` and ``harness.report``: run cases, write reports; ``harness.cli``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from harness._boundary import boundary, note

if TYPE_CHECKING:
    from harness.systems import System
    from harness.usersystem import Job, LedgerAdapter, jobs, planned_work, simple_system
    from harness.worker_config import WorkerConfig

__all__ = [
    "Job",
    "LedgerAdapter",
    "System",
    "WorkerConfig",
    "boundary",
    "jobs",
    "note",
    "planned_work",
    "simple_system",
]
__version__ = "0.1.0"

#: the rest of the public API, imported on first use (PEP 562): ``import harness`` in a
#: production worker that only calls ``boundary()`` must stay one small module, while
#: ``from harness import simple_system`` pulls in SQLAlchemy and requests as it needs to.
_LAZY = {
    "Job": "harness.usersystem",
    "LedgerAdapter": "harness.usersystem",
    "jobs": "harness.usersystem",
    "planned_work": "harness.usersystem",
    "simple_system": "harness.usersystem",
    "System": "harness.systems",
    "WorkerConfig": "harness.worker_config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
