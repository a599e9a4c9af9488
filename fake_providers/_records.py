"""Plain records shared by the server and the client: ``Effect`` and ``FaultRule``.

They live apart from both sides so that the server never imports ``requests`` and the
client never imports the WSGI app, yet both agree on one JSON shape for each record.
"""

from __future__ import annotations

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
)
"""Every value ``Effect.outcome`` can take."""

ACCEPTED_OUTCOMES: Final = ("fresh", "expired_then_accepted")
"""Outcomes that created a new effect at the provider (a message really went out)."""

FAULT_KINDS: Final = ("accept_then_drop", "status")
MATCH_FIELDS: Final = ("destination", "run_id", "idempotency_key")

FaultKind = Literal["accept_then_drop", "status"]


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

    @property
    def accepted(self) -> bool:
        """True if this request created a new effect (outcome fresh or expired_then_accepted)."""
        return self.outcome in ACCEPTED_OUTCOMES

    def to_json(self) -> dict[str, Any]:
        """Return the record as the JSON object the admin API serves."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Effect:
        """Build an ``Effect`` from the admin API's JSON object; unknown keys are an error."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        extra = [k for k in data if k not in names]
        if missing or extra:
            raise ProviderError(f"malformed effect record: missing={missing} extra={extra}")
        return cls(**{n: data[n] for n in names})

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
        if self.fault is not None:
            parts.append(f"fault={self.fault}")
        return " ".join(parts)


def _empty_match() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class FaultRule:
    """One injected fault, applied to POST /v1/messages requests that match.

    ``match`` holds exact values for any of destination, run_id, idempotency_key (all
    optional). The rule applies to matching requests number ``nth`` .. ``nth + times - 1``
    (counted per epoch, from 1); ``times=None`` means every matching request from ``nth`` on.
    """

    fault: FaultKind
    status: int | None = None
    retry_after: int | None = None
    match: Mapping[str, str] = field(default_factory=_empty_match)
    nth: int = 1
    times: int | None = 1

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
        unknown = [k for k in self.match if k not in MATCH_FIELDS]
        if unknown:
            raise ProviderError(f"unknown match field(s) {unknown}; allowed: {list(MATCH_FIELDS)}")
        if not all(isinstance(v, str) for v in self.match.values()):
            raise ProviderError("match values must be strings")
        if not isinstance(self.nth, int) or self.nth < 1:
            raise ProviderError(f"nth must be an integer >= 1, got {self.nth!r}")
        if self.times is not None and (not isinstance(self.times, int) or self.times < 1):
            raise ProviderError(f"times must be an integer >= 1 or null, got {self.times!r}")
        # Freeze the mapping so a frozen rule really cannot change under the server.
        object.__setattr__(self, "match", MappingProxyType(dict(self.match)))

    def matches(self, values: Mapping[str, str | None]) -> bool:
        """True if every field named in ``match`` equals the request's value."""
        return all(values.get(k) == v for k, v in self.match.items())

    def applies_to(self, match_number: int) -> bool:
        """True if the ``match_number``-th matching request (from 1) gets this fault."""
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
        return out

    @classmethod
    def from_json(cls, data: object) -> FaultRule:
        """Parse and validate one rule; raises ``ProviderError`` saying what is wrong."""
        if not isinstance(data, dict):
            raise ProviderError(f"a fault rule must be a JSON object, got {data!r}")
        allowed = {"fault", "status", "retry_after", "match", "nth", "times"}
        extra = sorted(set(data) - allowed)
        if extra:
            raise ProviderError(f"unknown fault rule field(s) {extra}; allowed: {sorted(allowed)}")
        if "fault" not in data:
            raise ProviderError("a fault rule needs a 'fault' field")
        match = data.get("match") or {}
        if not isinstance(match, dict):
            raise ProviderError("'match' must be a JSON object")
        for name in ("status", "retry_after", "nth", "times"):
            value = data.get(name)
            if isinstance(value, bool) or (value is not None and not isinstance(value, int)):
                raise ProviderError(f"{name!r} must be an integer, got {value!r}")
        return cls(
            fault=cast(FaultKind, data["fault"]),
            status=data.get("status"),
            retry_after=data.get("retry_after"),
            match=match,
            nth=data.get("nth", 1),
            times=data.get("times", 1),
        )
