"""Mutant ``backoff_past_window``: exponential backoff without a cap, over many attempts, and
no check of the key's window before a resend.

Doubling the delay "to be nice to the provider" and allowing twenty attempts looks prudent,
but the later attempts land long after the provider has forgotten the idempotency key: a
retry then is a brand-new message. The worker also trusts its schedule and skips the window
check the reference makes before each resend. ``retry_within_window`` must catch it from
what it did, not from its settings: in ``mutant-backoff-past-window`` its backoff really runs
(no autojump) past a 2.5 s provider window after two 503s, and the provider's log shows the
third attempt reusing the key after the window. (The same schedule in a worker that checks
the window, the reference, goes to review instead: the schedule alone is no violation.)
"""

from __future__ import annotations

from dataclasses import replace

from harness.mutants._base import mutant_system
from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import System

#: 1 s, 2 s, 4 s ... 2**18 s: the 18th retry waits three days; the sum passes 24 h at 17
BACKOFF_S: tuple[float, ...] = tuple(float(2**i) for i in range(19))
MAX_ATTEMPTS = 20


class BackoffPastWindowWorker(ReferenceWorker):
    """Retries on an uncapped exponential schedule and never checks the key's window."""

    def within_window(self, claim: Claim) -> bool:
        return True  # "the backoff schedule takes care of that"


def system() -> System:
    return replace(
        mutant_system(
            "backoff_past_window",
            BackoffPastWindowWorker,
            expected_violation="retry_within_window",
            catching_scenario="mutant-backoff-past-window",
        ),
        config_overrides={"retry_backoff_s": BACKOFF_S, "max_attempts": MAX_ATTEMPTS},
    )
