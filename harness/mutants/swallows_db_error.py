"""Mutant ``swallows_db_error``: a database error while recording an accepted send is
logged and shrugged off.

The provider accepted the message; then the worker's write of that fact fails because the
database server restarted under it (a failover, an operator's restart, a managed
database's maintenance window). The worker reconnects and carries on ("the send went out,
after all"), and its next write marks the delivery ``delivered``, without the provider's
receipt it never stored: nothing on record can be matched against the provider any more
(a refund, a dispute, a reconciliation has no id to go by). ``db_restart`` at
``after_provider_accept`` makes the error real; ``delivered_has_receipt`` must catch it.
The reference lets the error end the process; its restart reconciles the send by its key
and stores the receipt.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim, Ledger
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


def _is_db_error(exc: Exception) -> bool:
    """A DB-API error of whichever driver the run has (psycopg's without importing it)."""
    return isinstance(exc, (DBAPIError, sqlite3.Error)) or type(exc).__module__.startswith(
        "psycopg"
    )


class SwallowsDbErrorLedger(Ledger):
    """Drops an accept it could not write, reconnects, and goes on."""

    def persist_accepted(self, claim: Claim, provider_message_id: str, *, how: str) -> None:
        try:
            super().persist_accepted(claim, provider_message_id, how=how)
        except Exception as exc:
            if not _is_db_error(exc):
                raise
            self.close()  # a fresh connection for what comes next; the receipt is gone


class SwallowsDbErrorWorker(ReferenceWorker):
    """The reference, with a ledger that shrugs off a lost write of an accept."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = SwallowsDbErrorLedger(self.engine, config, clock=self.clock.now)


def system() -> System:
    return mutant_system(
        "swallows_db_error",
        SwallowsDbErrorWorker,
        expected_violation="delivered_has_receipt",
        catching_scenario="mutant-swallows-db-error",
    )
