"""What a checker sees: the scenario's intent, the ledger, the providers' logs, the trace.

Checkers get plain frozen data, never a database session, so each one is a pure function
that a unit test can feed hand-built rows. ``None`` for the ledger or the effects means that
evidence could not be read; a checker that needs it then answers *unknown*, never *pass*.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from harness.destinations import normal_form
from harness.engine.store.trace import TraceEvent
from harness.names import SETTLED_STATES

T = TypeVar("T")


class Status(StrEnum):
    """A checker's answer, and a case's verdict.

    ``GAP`` is a case verdict only (no checker answers it): a step the case planned (a crash,
    a pause, a provider fault) did not happen, so the case proves nothing about that step and
    is never a pass.
    """

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"
    GAP = "gap"
    #: a case verdict only, never a checker's: the same schedule failed in one run and
    #: passed in another (inconclusive, exit 3; every run is in the report)
    FLAKY = "flaky"


@dataclass(frozen=True)
class CheckResult:
    """A checker's verdict and the evidence a person needs to act on it."""

    status: Status
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "summary": self.summary, "evidence": self.evidence}


@dataclass(frozen=True)
class DeliveryRow:
    delivery_id: str
    run_id: str
    destination: str
    delivery_status: str
    idempotency_key: str
    provider_message_id: str | None = None
    attempt_count: int = 0
    created_by: str = ""
    created_at: float = 0.0
    credential_id: str | None = None
    destination_scope: str | None = None
    first_attempt_at: float | None = None
    next_attempt_at: float | None = None
    acknowledged_at: float | None = None
    key_window_s: float | None = None
    last_error: str | None = None
    #: when the current lease (if any) runs out; a claimed row is not overdue before that
    lease_expires_at: float | None = None
    #: the body the ledger recorded for this delivery, hashed in the providers' normal form
    #: (``harness.snapshot.body_hash``); None: the ledger adapter gives no body
    body_hash: str | None = None

    @property
    def settled(self) -> bool:
        return self.delivery_status in SETTLED_STATES


@dataclass(frozen=True)
class AuditRow:
    event_id: int
    delivery_id: str
    run_id: str
    event: str
    worker: str
    at: float = 0.0
    idempotency_key: str | None = None
    credential_id: str | None = None
    destination_scope: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class StatusChange:
    """One status a delivery row took, in the order the database recorded it (a trigger's
    record, not the worker's)."""

    seq: int
    delivery_id: str
    delivery_status: str
    attempt_count: int = 0
    lease_epoch: int = 0


@dataclass(frozen=True)
class EffectRow:
    """One request as the provider logged it (its log is the ground truth)."""

    seq: int
    destination: str
    run_id: str
    delivery_id: str
    idempotency_key: str
    outcome: str
    provider_message_id: str | None = None
    received_at: float = 0.0
    fault: str | None = None
    credential_id: str | None = None
    status_code: int | None = None
    #: the provider that logged it (``[provider.NAME]``; a single ``[provider]`` is named
    #: after its preset); "" for a row built by hand
    provider: str = ""
    #: the provider's ``unattributed: ...`` reason: its identification rule read no run (or
    #: no destination) from the request; None when the rule attributed it
    unattributed: str | None = None
    #: how the harness attributed a request the rule could not (``harness.invariants.
    #: _attribution``): "delivery" (the user's own id is an intended run) or "destination"
    #: (the one intended run to that recipient); None if it did not have to
    joined_by: str | None = None
    #: the message text the provider received, hashed in its normal form
    #: (``fake_providers.body_hash``); None: no text to read, or an older log
    body_hash: str | None = None
    #: the Retry-After (seconds) the provider's answer carried; None: none
    retry_after_s: float | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome in ("fresh", "expired_then_accepted")

    @property
    def attributed(self) -> bool:
        """Whether the request names a run (read by the rule, or joined by the harness):
        an effect that does not is counted apart, never under an empty run."""
        return bool(self.run_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "destination": self.destination,
            "run_id": self.run_id,
            "delivery_id": self.delivery_id,
            "idempotency_key": self.idempotency_key,
            "outcome": self.outcome,
            "provider_message_id": self.provider_message_id,
            "fault": self.fault,
            "credential_id": self.credential_id,
            "received_at": self.received_at,
            **({"provider": self.provider} if self.provider else {}),
            **({"unattributed": self.unattributed} if self.unattributed else {}),
            **({"joined_by": self.joined_by} if self.joined_by else {}),
            **({"retry_after_s": self.retry_after_s} if self.retry_after_s is not None else {}),
        }


@dataclass(frozen=True)
class LedgerSnapshot:
    committed_runs: frozenset[str]
    frozen_destinations: dict[str, tuple[str, ...]]
    deliveries: tuple[DeliveryRow, ...]
    queue: frozenset[str]
    audit: tuple[AuditRow, ...]
    #: delivery_status -> rows, as an operator's ``GROUP BY delivery_status`` query sees them
    #: (None when the ledger adapter does not run that query)
    state_counts: dict[str, int] | None = None
    #: why there are no delivery rows to read at all (a system plugged in without a ledger
    #: adapter); None: ``deliveries`` is what the ledger holds
    no_rows_because: str | None = None
    #: every status each delivery row held, in order, as the database's trigger recorded it
    #: (None when the ledger adapter has no such record)
    status_history: tuple[StatusChange, ...] | None = None
    #: why the harness refused to read this ledger (a value its adapter does not map); a
    #: checker reading any part of it then answers *unknown*, and the case's note says why.
    #: None: read as it is
    refused: str | None = None


@dataclass(frozen=True)
class Policy:
    """What the scenario set up, for checkers that judge against a promise, not a count."""

    #: the dedupe window the worker was told (``WorkerConfig.key_window_s``; its ledger rows
    #: may declare their own): the worker's word, shown beside the provider's window, never
    #: what a verdict is judged by
    key_window_s: float
    #: the worker's delay before attempt n+1 (last value repeats)
    retry_backoff_s: tuple[float, ...]
    max_attempts: int
    lease_s: float
    #: credential id -> destination globs it may send to
    credential_scopes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: whether the provider can be asked about a key after a timeout
    provider_lookup: bool = True
    #: whether the provider dedupes by idempotency key at all (False: chat, SMTP; there is
    #: no window to keep, and a resend is judged by the effects it makes)
    provider_keys: bool = True
    #: how long past ``next_attempt_at`` an unsettled item may sit before it must be flagged
    liveness_grace_s: float = 1.0
    #: the longest one attempt may take (the worker's request timeout); None: use ``lease_s``
    request_timeout_s: float | None = None
    #: the slowest acceptable overdue detection, seconds; None: measure and report only
    liveness_max_detection_s: float | None = None
    #: the dedupe window the provider applies, seconds: what the provider reports it runs
    #: with (``GET /_admin/info``), else what the harness configured it with; None: not
    #: recorded (a reused key then cannot be judged against a window)
    provider_window_s: float | None = None
    #: the provider preset the case ran against: which normal form says two destination
    #: spellings are one recipient (``harness.destinations``); None: the opaque-id form
    surface: str | None = None
    #: the case's providers by name when it has several (``harness.engine.plan._providers``):
    #: effects
    #: are counted per (run, destination) across all of them; empty: one provider
    providers: tuple[str, ...] = ()
    #: with several providers: each one's own ``provider_keys``, ``provider_lookup`` and
    #: ``provider_window_s`` (the fields above are the first provider's); a checker that
    #: judges against a provider's promise judges each provider's effects by its own
    #: (``each_provider``)
    per_provider: dict[str, ProviderPolicy] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderPolicy:
    """One provider's promise, when a case has several (``Policy.per_provider``)."""

    keys: bool = True
    lookup: bool = True
    window_s: float | None = None


@dataclass(frozen=True)
class Observation:
    """Everything known about one finished case."""

    #: run_id -> the destinations the scenario intends it to reach
    intended: dict[str, tuple[str, ...]]
    ledger: LedgerSnapshot | None
    effects: tuple[EffectRow, ...] | None
    #: worker incarnations in start order
    workers: tuple[str, ...] = ()
    policy: Policy | None = None
    #: boundary hits, spawns, exits and harness actions (restore, clock jump...) in order
    trace: tuple[TraceEvent, ...] = ()
    #: the shared clock's reading when the evidence was collected (ledger times are on that
    #: clock); None if the harness did not record it
    observed_at: float | None = None
    #: how far the provider's clock ran ahead of wall time when the case started (its offset
    #: persists across cases); lets a checker put trace times on the provider's clock
    provider_clock_offset_s: float = 0.0


#: summary prefix of an *unknown* that means "this system gives no evidence for it" (a worker
#: plugged in without a ledger adapter): reported, but not held against the case's verdict
NOT_JUDGED = "[not judged]"


def no_rows(ledger: LedgerSnapshot) -> CheckResult | None:
    """*Not judged* when the ledger has no rows to read at all (no adapter): a checker of rows
    never passes on none; None when there are rows to judge."""
    if ledger.no_rows_because is None:
        return None
    return CheckResult(
        Status.UNKNOWN,
        f"{NOT_JUDGED} {ledger.no_rows_because}",
        {"no_rows_because": ledger.no_rows_because},
    )


class MissingEvidenceError(Exception):
    """A checker needs evidence that could not be collected; the result is unknown."""


def need(value: T | None, what: str) -> T:
    if value is None:
        raise MissingEvidenceError(f"{what} could not be read")
    return value


Checker = Callable[[Observation], CheckResult]


def each_provider(obs: Observation, check: Checker) -> CheckResult | None:
    """``check`` run once per provider on that provider's effects and promise (its keys,
    lookup and window), the answers combined: a failure of any is the failure (named after
    its provider), then an unknown, else a pass. None with a single provider: the caller
    judges as usual. A window of one provider must never judge another's effects: a retry
    inside the payments API's 24 h could otherwise be blamed by a queue's 5 minutes."""
    from dataclasses import replace

    policy = obs.policy
    if policy is None or not policy.per_provider or obs.effects is None:
        return None
    results: dict[str, CheckResult] = {}
    for name, own in policy.per_provider.items():
        narrowed = replace(
            policy,
            provider_keys=own.keys,
            provider_lookup=own.lookup,
            provider_window_s=own.window_s,
            per_provider={},
        )
        mine = tuple(e for e in obs.effects if e.provider == name)
        results[name] = check(replace(obs, effects=mine, policy=narrowed))
    evidence = {"by_provider": {n: r.to_json() for n, r in results.items()}}
    for status in (Status.FAIL, Status.UNKNOWN):
        hit = [(n, r) for n, r in results.items() if r.status is status]
        if hit:
            summary = "; ".join(f"provider {n}: {r.summary}" for n, r in hit)
            if all(r.summary.startswith(NOT_JUDGED) for _, r in hit):
                summary = f"{NOT_JUDGED} {summary}"  # a blind spot stays one
            return CheckResult(status, summary, evidence)
    summary = "; ".join(f"provider {n}: {r.summary}" for n, r in results.items())
    return CheckResult(Status.PASS, summary, evidence)


def surface_of(obs: Observation) -> str | None:
    """The surface whose normal form compares this case's destinations."""
    return obs.policy.surface if obs.policy is not None else None


def recipient(obs: Observation, destination: str) -> str:
    """``destination`` in the case's normal form: equal for two spellings of one recipient."""
    return normal_form(destination, surface_of(obs))


def by_identity(
    rows: tuple[DeliveryRow, ...], surface: str | None = None
) -> dict[tuple[str, str], list[DeliveryRow]]:
    """Delivery rows grouped by (run, destination in ``surface``'s normal form)."""
    groups: dict[tuple[str, str], list[DeliveryRow]] = {}
    for row in rows:
        groups.setdefault((row.run_id, normal_form(row.destination, surface)), []).append(row)
    return groups


def column_not_given(ledger: LedgerSnapshot, column: str) -> str | None:
    """Why ``ledger``'s rows cannot give ``column`` (``NOT_JUDGED`` and the system's reason),
    or None when they can: for a checker that can still judge part of its promise without it."""
    not_given = getattr(ledger, "not_given", None) or {}
    why = not_given.get(column)
    return None if why is None else f"{NOT_JUDGED} ledger column {column.replace('_', ' ')}: {why}"
