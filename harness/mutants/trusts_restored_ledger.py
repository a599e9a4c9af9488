"""Mutant ``trusts_restored_ledger``: after a restore, sends whatever the ledger says was never
sent, however old it is.

The reference's rule for a crash is "an attempt on record means reconcile first; none means
this is the first send". A ledger restored from a backup breaks the second half: the backup
predates sends that happened. Inside the key's window the provider dedupes the resend, so the
mistake hides; restore a backup older than the window (a day-old nightly, for a payments API)
and every forgotten send is delivered again. Found by ``crash-harness explore`` as
``restore_backup@after_claim#1+clock_jump@after_claim#1``.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class TrustsRestoredLedgerWorker(ReferenceWorker):
    """Treats "no attempt recorded" as "never sent", even for a delivery past its window."""

    def may_have_forgotten_a_send(self, claim: Claim) -> bool:
        return False


def system() -> System:
    return mutant_system(
        "trusts_restored_ledger",
        TrustsRestoredLedgerWorker,
        expected_violation="restore_no_replay",
        catching_scenario="mutant-trusts-restored-ledger",
    )
