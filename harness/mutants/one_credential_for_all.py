"""Mutant ``one_credential_for_all``: signs every request with one credential, whatever the
destination, while its ledger names the right one.

A deployment gives the worker one credential per destination group (a tenant, a queue, a
domain). This worker chooses and records the right credential for each delivery, as the
reference does, but its HTTP session was built once with the first credential and sends
everything with it. Its own audit trail therefore looks perfect; only the provider knows
which credential arrived, and it refuses (403) every send outside that credential's scope.
Exposed only where credentials are narrowed (``mutant-one-credential-for-all``: one per
topic); ``credential_scope`` must catch it from the provider's log.
"""

from __future__ import annotations

from harness.mutants._base import mutant_system
from harness.reference.adapters import ProviderAdapter
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class OneCredentialForAllWorker(ReferenceWorker):
    """Sends every delivery with the first credential it was given."""

    def adapter_for(self, claim: Claim) -> ProviderAdapter:
        return self.provider


def system() -> System:
    return mutant_system(
        "one_credential_for_all",
        OneCredentialForAllWorker,
        expected_violation="credential_scope",
        catching_scenario="mutant-one-credential-for-all",
    )
