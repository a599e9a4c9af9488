"""Next versions of the reference, for ``deploy`` cases (``[worker] next = "MODULE:NAME"``).

A deploy hands the work one version left to the next. ``REKEYED`` is a version 2 that
changed how it derives idempotency keys (``v2-`` plus the delivery id, say, after a
refactor of the key helper): correct on its own, and a duplicate across the upgrade, because
a send version 1 made under the old key is looked up, and sent again, under the new one.
The fixed upgrade keeps the key stored with the delivery (the reference does: the key is
fixed at enqueue), so ``next = "reference"`` holds.
"""

from __future__ import annotations

import dataclasses

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System


class RekeyedWorker(ReferenceWorker):
    """Version 2 derives its idempotency key anew, ignoring the one stored at enqueue."""

    def key_for_attempt(self, claim: Claim, attempt: int) -> str:
        return f"v2-{claim.delivery_id}"


def _rekeyed() -> System:
    system = mutant_system("rekeyed_v2", RekeyedWorker, expected_violation="exactly_once_effect")
    return dataclasses.replace(system, name="harness.mutants._upgrades:REKEYED")


#: version 2, rekeyed: a duplicate across the upgrade
REKEYED = _rekeyed()
