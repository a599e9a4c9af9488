"""crash-harness: prove that a crash and restart never sends a message twice or loses one.

What lives where:

- ``harness.boundary`` (from ``_boundary``): the one call a worker adds to its own code.
  Importing ``harness`` imports nothing heavy, so production code can keep the calls.
- ``harness.names``: canonical boundary, state and invariant names.
- ``harness.errors``: the error tree and exit statuses.
- ``harness.supervisor``: forks, arms, kills and reaps worker processes.
- ``harness.reference``: the ledger and worker that do it right; ``harness.mutants``: the
  catalogue of broken workers the harness must catch.
- ``harness.invariants``: one checker module per invariant.
- ``harness.campaign`` and ``harness.report``: run cases, write reports; ``harness.cli``.
"""

from harness._boundary import boundary, note

__all__ = ["boundary", "note"]
__version__ = "0.1.0"
