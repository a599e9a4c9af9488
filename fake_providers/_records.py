"""Plain records shared by the server and the client: ``Effect`` and ``FaultRule``.

They live apart from both sides so that the server never imports ``requests`` and the
client never imports the WSGI app, yet both agree on one JSON shape for each record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, Literal, cast

from fake_providers._errors import ProviderError

OUTCOMES: Final = (
    "fresh",
    "deduplicated",
    "expired_then_accepted",
    "rejected",
    "refused",
    "unauthenticated",
    "failed_by_fault",
    "stale_epoch",
)
"""Every value ``Effect.outcome`` can take (``stale_epoch``: a request of an epoch that was
over, refused with 410 and logged in its own epoch, never in the current one)."""

ACCEPTED_OUTCOMES: Final = ("fresh", "expired_then_accepted")
"""Outcomes that created a new effect at the provider (a message really went out)."""

FAULT_KINDS: Final = ("accept_then_drop", "status", "timeout", "slow")
MATCH_FIELDS: Final = ("destination", "run_id", "delivery_id", "idempotency_key")
THEN_ACTIONS: Final = ("reply", "drop")

FaultKind = Literal["accept_then_drop", "status", "timeout", "slow"]
ThenAction = Literal["reply", "drop"]

MAX_HOLD_S: Final = 3600.0
"""Longest hold or delay a fault may ask for (a typo of 1e6 s would hang a test run)."""


#: ``Effect`` fields left out of its JSON when None (older records never had them)
_OPTIONAL: Final = ("reason", "body_hash", "retry_after")


@dataclass(frozen=True)
class Effect:
    """One request that reached the provider's handler, as written to the durable log."""

    seq: int
    epoch: int
    received_at: float
    credential_id: str | None
    destination: str | None
    run_id: str | None
    delivery_id: str | None
    idempotency_key: str | None
    payload_hash: str | None
    recognizer: str | None
    outcome: str
    provider_message_id: str | None
    fault: str | None
    status_code: int | None
    #: why the provider refused or failed the request, or ``unattributed: ...`` when an
    #: accepted request's identity could not be read (None: nothing to say)
    reason: str | None = None
    #: sha256 of the message text in its normal form (``fake_providers._body``); None: the
    #: request carried no text the preset could read, or an older log
    body_hash: str | None = None
    #: the Retry-After (seconds) the answer gave (a ``status`` fault), None: none
    retry_after: int | None = None

    @property
    def unattributed(self) -> bool:
        """True if the identification rule could not say whose delivery this was."""
        return (self.reason or "").startswith("unattributed:")

    @property
    def accepted(self) -> bool:
        """True if this request created a new effect (outcome fresh or expired_then_accepted)."""
        return self.outcome in ACCEPTED_OUTCOMES

    def to_json(self) -> dict[str, Any]:
        """Return the record as the JSON object the admin API serves."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for optional in _OPTIONAL:
            if out[optional] is None:
                del out[optional]  # records with nothing to say keep their old shape
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Effect:
        """Build an ``Effect`` from the admin API's JSON object; unknown keys are an error."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data and n not in _OPTIONAL]
        extra = [k for k in data if k not in names]
        if missing or extra:
            raise ProviderError(f"malformed effect record: missing={missing} extra={extra}")
        return cls(**{n: data[n] for n in names if n in data})

    def describe(self) -> str:
        """One human-readable line, used in assertion messages."""
        parts = [
            f"#{self.seq}",
            f"epoch={self.epoch}",
            f"outcome={self.outcome}",
            f"status={self.status_code}",
            f"destination={self.destination!r}",
            f"run_id={self.run_id!r}",
            f"delivery_id={self.delivery_id!r}",
            f"key={self.idempotency_key!r}",
            f"id={self.provider_message_id!r}",
        ]
        if self.reason is not None:
            parts.append(f"reason={self.reason!r}")
        if self.fault is not None:
            parts.append(f"fault={self.fault}")
        return " ".join(parts)


def _empty_match() -> Mapping[str, str]:
    return MappingProxyType({})


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class FaultRule:
    """One injected fault, applied to worker requests (HTTP POSTs, SMTP DATA) that match.

    Kinds (what the client sees / what the log holds):

    - ``accept_then_drop``: processed and logged as usual, then the connection is cut with
      no reply (SMTP: before the final 250 to DATA).
    - ``timeout``: processed and logged, then the reply is held ``hold_s`` seconds and
      sent (``then="reply"``, the default) or the connection cut (``then="drop"``).
    - ``status``: answered ``status`` (with ``Retry-After: retry_after`` if given) before
      anything is processed; logged ``failed_by_fault``, no effect, the key is not used up.
    - ``slow``: held ``delay_s`` seconds *before* processing, then handled normally.

    ``match`` holds exact values for any of destination, run_id, delivery_id,
    idempotency_key (all optional; for SMTP, destination matches any recipient). The rule
    applies to matching requests number ``nth`` .. ``nth + times - 1`` (counted per epoch,
    from 1); ``times=None`` means every matching request from ``nth`` on. With
    ``probability`` set, each of those requests gets the fault with that probability, drawn
    from ``random.Random(seed)`` (seed 0 if not given), so a given seed and request order
    always fault the same requests.
    """

    fault: FaultKind
    status: int | None = None
    retry_after: int | None = None
    match: Mapping[str, str] = field(default_factory=_empty_match)
    nth: int = 1
    times: int | None = 1
    hold_s: float | None = None
    then: ThenAction | None = None
    delay_s: float | None = None
    probability: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.fault not in FAULT_KINDS:
            raise ProviderError(f"unknown fault {self.fault!r}; known: {', '.join(FAULT_KINDS)}")
        if self.fault == "status":
            if not isinstance(self.status, int) or not 100 <= self.status <= 599:
                raise ProviderError(f"a 'status' fault needs an HTTP status, got {self.status!r}")
        elif self.status is not None:
            raise ProviderError(f"fault {self.fault!r} takes no status")
        if self.retry_after is not None and (
            not isinstance(self.retry_after, int) or self.retry_after < 0
        ):
            raise ProviderError(f"retry_after must be a whole number >= 0: {self.retry_after!r}")
        if self.retry_after is not None and self.fault != "status":
            raise ProviderError(f"fault {self.fault!r} takes no retry_after")
        self._check_timing()
        unknown = [k for k in self.match if k not in MATCH_FIELDS]
        if unknown:
            raise ProviderError(f"unknown match field(s) {unknown}; allowed: {list(MATCH_FIELDS)}")
        if not all(isinstance(v, str) for v in self.match.values()):
            raise ProviderError("match values must be strings")
        if not isinstance(self.nth, int) or self.nth < 1:
            raise ProviderError(f"nth must be an integer >= 1, got {self.nth!r}")
        if self.times is not None and (not isinstance(self.times, int) or self.times < 1):
            raise ProviderError(f"times must be an integer >= 1 or null, got {self.times!r}")
        if self.probability is not None and (
            not _is_number(self.probability) or not 0 < self.probability <= 1
        ):
            raise ProviderError(f"probability must be in (0, 1], got {self.probability!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | None):
            raise ProviderError(f"seed must be an integer, got {self.seed!r}")
        if self.seed is not None and self.probability is None:
            raise ProviderError("seed only makes sense with probability")
        # Freeze the mapping so a frozen rule really cannot change under the server.
        object.__setattr__(self, "match", MappingProxyType(dict(self.match)))

    def _check_timing(self) -> None:
        if self.fault == "timeout":
            if not _is_number(self.hold_s) or not 0 < cast(float, self.hold_s) <= MAX_HOLD_S:
                raise ProviderError(
                    f"a 'timeout' fault needs hold_s in (0, {MAX_HOLD_S}], got {self.hold_s!r}"
                )
            if self.then is not None and self.then not in THEN_ACTIONS:
                raise ProviderError(f"then must be one of {list(THEN_ACTIONS)}, got {self.then!r}")
        else:
            if self.hold_s is not None or self.then is not None:
                raise ProviderError(f"fault {self.fault!r} takes no hold_s or then")
        if self.fault == "slow":
            if not _is_number(self.delay_s) or not 0 <= cast(float, self.delay_s) <= MAX_HOLD_S:
                raise ProviderError(
                    f"a 'slow' fault needs delay_s in [0, {MAX_HOLD_S}], got {self.delay_s!r}"
                )
        elif self.delay_s is not None:
            raise ProviderError(f"fault {self.fault!r} takes no delay_s")

    @property
    def drops(self) -> bool:
        """True if the client gets no reply at all (accept_then_drop, timeout then drop)."""
        return self.fault == "accept_then_drop" or (self.fault == "timeout" and self.then == "drop")

    def matches(self, values: Mapping[str, str | None]) -> bool:
        """True if every field named in ``match`` equals the request's value."""
        return all(values.get(k) == v for k, v in self.match.items())

    def applies_to(self, match_number: int) -> bool:
        """True if the ``match_number``-th matching request (from 1) is in the nth/times range."""
        if match_number < self.nth:
            return False
        return self.times is None or match_number < self.nth + self.times

    def to_json(self) -> dict[str, Any]:
        """Return the rule as the JSON object ``POST /_admin/faults`` accepts."""
        out: dict[str, Any] = {"fault": self.fault}
        if self.status is not None:
            out["status"] = self.status
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        if self.match:
            out["match"] = dict(self.match)
        out["nth"] = self.nth
        out["times"] = self.times
        for name in ("hold_s", "then", "delay_s", "probability", "seed"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, data: object) -> FaultRule:
        """Parse and validate one rule; raises ``ProviderError`` saying what is wrong."""
        if not isinstance(data, dict):
            raise ProviderError(f"a fault rule must be a JSON object, got {data!r}")
        allowed = {f.name for f in fields(cls)}
        extra = sorted(set(data) - allowed)
        if extra:
            raise ProviderError(f"unknown fault rule field(s) {extra}; allowed: {sorted(allowed)}")
        if "fault" not in data:
            raise ProviderError("a fault rule needs a 'fault' field")
        match = data.get("match") or {}
        if not isinstance(match, dict):
            raise ProviderError("'match' must be a JSON object")
        for name in ("status", "retry_after", "nth", "times", "seed"):
            value = data.get(name)
            if isinstance(value, bool) or (value is not None and not isinstance(value, int)):
                raise ProviderError(f"{name!r} must be an integer, got {value!r}")
        for name in ("hold_s", "delay_s", "probability"):
            value = data.get(name)
            if value is not None and not _is_number(value):
                raise ProviderError(f"{name!r} must be a number, got {value!r}")
        return cls(
            fault=cast(FaultKind, data["fault"]),
            status=data.get("status"),
            retry_after=data.get("retry_after"),
            match=match,
            nth=data.get("nth", 1),
            times=data.get("times", 1),
            hold_s=None if data.get("hold_s") is None else float(data["hold_s"]),
            then=data.get("then"),
            delay_s=None if data.get("delay_s") is None else float(data["delay_s"]),
            probability=None if data.get("probability") is None else float(data["probability"]),
            seed=data.get("seed"),
        )
