"""The canonical names that users, reports and checks rely on (fixed by SPEC.md).

Kept in one place so a report, a checker and the docs can never disagree on spelling.
"""

from __future__ import annotations

from typing import Final

#: The documented crash points, in the order the reference worker reaches them.
BOUNDARIES: Final[dict[str, str]] = {
    "before_result_commit": "work done, result not yet committed",
    "destinations_resolved": "roster looked up, list not yet frozen",
    "after_result_commit": "result committed, delivery item not yet written",
    "after_delivery_enqueue": "delivery item durable, not yet claimed",
    "after_claim": "lease taken, request not yet sent",
    "before_reconcile": "a lookup or surface inspection is about to run",
    "before_retry": "a retry is about to be sent (attempt n)",
    "after_provider_accept": "provider accepted, response not yet persisted (the hard case)",
    "after_response_persisted": "response or unknown persisted, not yet acknowledged",
    "after_ack": "acknowledged in the ledger, queue item not yet cleaned up",
    "after_cleanup": "queue item removed",
}

#: Delivery states an operator must be able to tell apart.
DELIVERY_STATES: Final[tuple[str, ...]] = (
    "pending",
    "claimed",
    "delivered",
    "failed",
    "unknown",
    "review",
)

#: States a delivery may end a run in without being "simply gone".
SETTLED_STATES: Final[frozenset[str]] = frozenset({"delivered", "failed", "unknown", "review"})

#: States in which a worker stops acting on a delivery. ``unknown`` is not one of them: while
#: the provider can still be asked, an unknown delivery must be reconciled, not abandoned.
TERMINAL_STATES: Final[frozenset[str]] = frozenset({"delivered", "failed", "review"})
