"""The usual fix for each invariant, one line each, and where the docs say more (#26 item 11).

A failure tells the reader what went wrong; this says what usually puts it right, so every
route that names a failed invariant (the console case line, every report format, the pytest
failure) can add one line of what to do and a link to the invariant's section in
``docs/invariants.md``. One table, here: a new invariant without a fix line fails
``tests/test_fixes.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

#: the document whose sections the links point at (relative to the project's root)
DOC = "docs/invariants.md"

#: invariant -> the usual fix, one line
FIXES: dict[str, str] = {
    "one_delivery_identity": (
        "derive each delivery's id once from (run, destination) when the run commits, with a"
        " unique key on the pair; never a fresh id per attempt or per worker"
    ),
    "no_restart_duplicates": (
        "create delivery rows in the transaction that commits the run; a restarted worker"
        " looks its rows up and never creates them again"
    ),
    "stable_idempotency_key": (
        "derive the idempotency key once from the delivery's identity, store it on the row at"
        " commit, and send that stored key on every attempt"
    ),
    "exactly_once_effect": (
        "send with the delivery's stored idempotency key, and after a crash or a lost reply"
        " reconcile (ask the provider) before any resend"
    ),
    "no_unintended_effect": (
        "send each delivery only under the run, delivery id and key the ledger holds for it;"
        " never send a message again under ids of its own (a copy, a test send, a resend"
        " after a reset)"
    ),
    "accepted_reconciled_or_unknown": (
        "after a lost reply record the delivery `unknown` and reconcile with the provider;"
        " never record `failed` what the provider may have accepted"
    ),
    "no_silent_loss": (
        "commit the intent and its deliveries in one transaction, and let recovery pick up"
        " every row not yet in a terminal state"
    ),
    "audit_survives_cleanup": (
        "let cleanup prune only terminal rows past their retention period, never a row the"
        " audit trail or the provider still refers to"
    ),
    "states_distinguishable": (
        "write only the documented states: a lost reply is `unknown` (not `failed` or"
        " `pending`), and every `failed` row keeps its `last_error`"
    ),
    "retry_within_window": (
        "keep every retry of a key inside the provider's dedupe window (the whole backoff"
        " under it); past it, reconcile instead of resending"
    ),
    "frozen_destinations": (
        "freeze the destinations at commit and deliver to that frozen list; never re-read the"
        " roster when sending"
    ),
    "liveness": (
        "run a watchdog that flags work past `next_attempt_at` + grace, and supervise tasks so"
        " one that never started or died is restarted or flagged"
    ),
    "credential_scope": (
        "choose the credential the grants give for each destination, and name credential and"
        " scope on every attempt's audit event"
    ),
    "restore_no_replay": (
        "after restoring the ledger from a backup, reconcile with the provider before"
        " resending anything the restored rows call pending"
    ),
    "delivered_has_receipt": (
        "mark a delivery `delivered` only with the provider's answer in hand, and store the"
        " id the provider issued (its receipt) in the same write"
    ),
    "retry_after_honoured": (
        "schedule the next attempt no earlier than the Retry-After of the answer it follows"
        " (keep the larger of it and your own backoff)"
    ),
    "content_matches_ledger": (
        "render the body once per delivery at commit, store it (or its hash) on the row, and"
        " send exactly that stored body on every attempt"
    ),
}


#: invariant -> the usual fix for an agent, whose framework recovers the run from its
#: checkpoint or step records while a tool call sends (a ledger row and a transaction are
#: outbox advice, which an agent that keeps no delivery record cannot follow)
AGENT_FIXES: dict[str, str] = {
    "exactly_once_effect": (
        "key the tool's send by what was durable before the tool ran (the run and the"
        " recipient, or a DBOS workflow id and step id), never the model's tool call id, and"
        " send it where the receiver dedupes, or have the tool ask the receiver first"
    ),
    "stable_idempotency_key": (
        "derive the tool's key from the run and the recipient, not from the tool call id or a"
        " fresh uuid: a resumed run asks the model again and gets new ids"
    ),
    "accepted_reconciled_or_unknown": (
        "on a resumed run, have the tool ask the receiver whether it already has the message"
        " and return that as its result, so the transcript records the send it made"
    ),
    "no_silent_loss": (
        "record each run before the agent starts (an intake row), and on start-up resume"
        " every thread that has not finished, pending tasks included (LangGraph:"
        " `state.next or state.tasks`), and start every run with no thread at all"
    ),
}

#: how a discovered point names a framework's own commit (``harness.engine.process.
#: _framework_points``): a case that reached one ran an agent
FRAMEWORK_POINTS = (".langgraph.", ".dbos.")


def is_agent(reached: Iterable[str]) -> bool:
    """Whether a case's points say its worker is an agent (a framework's commits named)."""
    return any(part in name for name in reached for part in FRAMEWORK_POINTS)


def anchor(name: str) -> str:
    """The invariant's section anchor in ``DOC`` (its heading is the bare name)."""
    return name.lower()


def link(name: str) -> str:
    """``docs/invariants.md#exactly_once_effect``."""
    return f"{DOC}#{anchor(name)}"


def usual_fix(name: str, *, agent: bool = False) -> str | None:
    """The usual fix for ``name``: an agent's where it has one of its own."""
    return (AGENT_FIXES.get(name) if agent else None) or FIXES.get(name)


def fix_line(name: str, *, agent: bool = False) -> str | None:
    """``fix: <the usual fix> (docs/invariants.md#name)``; None for an invariant without one.
    ``agent``: the worker is an agent (``is_agent``), told the fix in its own terms."""
    fix = usual_fix(name, agent=agent)
    if not fix:
        return None
    where = "docs/agents.md" if agent and name in AGENT_FIXES else link(name)
    return f"fix: {fix} ({where})"
