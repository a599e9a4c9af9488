"""Mutant ``body_per_run``: renders a run's message once and sends that text to every recipient.

"It is the same announcement for everyone": the worker caches the first body it sends for a
run and reuses it for the run's other deliveries. Each recipient gets exactly one message,
with the right key and the right receipt, so every count agrees; but the text (and the
reference in it) is the first recipient's. On a surface with no recognizer in the visible
text (payments) nothing else notices; ``content_matches_ledger`` must catch it in the
baseline from the body hash in the provider's log.
"""

from __future__ import annotations

from dataclasses import replace

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


class BodyPerRunWorker(ReferenceWorker):
    """Sends the first body it rendered for a run to all of the run's recipients."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.rendered: dict[str, str] = {}

    def attempt(self, claim: Claim) -> None:
        body = self.rendered.setdefault(claim.run_id, claim.body)
        super().attempt(replace(claim, body=body))


def system() -> System:
    return mutant_system(
        "body_per_run", BodyPerRunWorker, expected_violation="content_matches_ledger"
    )
