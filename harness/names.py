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

#: The kinds of crash point the harness finds itself in a Python worker that declares none
#: (``harness.engine.process._hooks``), in the order a send or a commit reaches them. Such a point
#: is
#: named ``KIND.WHERE``, WHERE being the worker's own call site (``<file stem>.<line>``): e.g.
#: ``after_send.plain_worker.42``.
NEAR_SIDE_KINDS: Final[dict[str, str]] = {
    "before_send": "an HTTP request or SMTP send is about to leave the worker",
    "after_send": "the provider answered (it accepted), the worker has not yet acted on it",
    "before_commit": "a database commit is about to run",
    "after_commit": "a database commit returned",
}


def near_side_kind(name: str) -> str | None:
    """The kind of a discovered near-side point (``after_send.w.42`` -> ``after_send``), or
    None for any other name (a named boundary, a far-side point)."""
    kind, dot, where = name.partition(".")
    return kind if dot and where and kind in NEAR_SIDE_KINDS else None


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
