"""crash-harness: prove that a crash and restart never sends a message twice or loses one.

What lives where (the rooms; ``tests/test_architecture.py`` keeps them):

- The public face, the modules directly in ``harness/``: what a user's system imports.
  ``harness.boundary`` and ``note`` (the one call a worker adds to its own code; importing
  ``harness`` imports nothing heavy, so production code can keep the calls);
  ``simple_system``, ``jobs``, ``planned_work``, ``Job``, ``LedgerAdapter``, ``WorkerConfig``,
  ``System`` (plugging in your own worker, ``docs/own-worker.md``; loaded on first use);
  ``harness.systems`` (``System``, finding a system by ``module:attr``), ``usersystem``,
  ``worker_config``, ``intake`` (the tables the harness writes; ``Roster``), ``snapshot``
  (what ``read_ledger`` returns), ``db`` (opening the case database as the harness does),
  ``presets`` (what a campaign knows of each provider preset), ``destinations``, ``clock``,
  ``names`` (canonical boundary, state and invariant names), ``errors`` (the error tree and
  exit statuses), ``identities`` (a delivery's stable ids).
- ``harness.engine``: what runs a campaign, one room per stage of a case's life (``store``,
  ``process``, ``plan``, ``case``, ``search``, and ``results``, the types it hands out);
  not public. It imports no subject and never the reports.
- ``harness.cli``: the ``crash-harness`` command, one module per command.
- ``harness.faults``, ``harness.invariants``, ``harness.reports``: one module per fault, per
  invariant checker, per report format (``harness.reports.outcome``: a report's exit status).
- The subjects: ``harness.reference`` (the ledger and worker that do it right) and
  ``harness.mutants`` (the catalogue of broken workers the harness must catch). They import
  only the public face, as a user's system does, and the harness finds them by name
  (``harness.systems.SUBJECTS``, ``MUTANTS``), as it finds a user's.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from harness.engine.process._boundary import boundary, note

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
