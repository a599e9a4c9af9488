"""The fault rules armed for the current epoch, counted and drawn in one place.

Every preset and the SMTP listener pick their fault here, so a rule's ``nth``, its
probability and its dice behave the same whoever serves the request, and the harness can
read back how often each rule matched and fired to confirm a planned fault landed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fake_providers._records import FaultRule


@dataclass
class _Armed:
    """A fault rule, how many requests have matched it in this epoch, and its dice."""

    rule: FaultRule
    matched: int = 0
    #: requests this rule was applied to (the harness confirms a planned fault landed)
    fired: int = 0
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def arm(cls, rule: FaultRule) -> _Armed:
        return cls(rule=rule, rng=random.Random(rule.seed or 0))


class Faults:
    """The armed rules, in order (the first applicable one wins). Caller holds the core's
    lock for every call."""

    def __init__(self) -> None:
        self._armed: list[_Armed] = []

    def arm(self, rules: Sequence[FaultRule]) -> None:
        """Replace the armed rules with ``rules``, each counted and seeded afresh."""
        self._armed = [_Armed.arm(rule) for rule in rules]

    def clear(self) -> None:
        """No rule is armed."""
        self._armed = []

    def pick(self, candidates: Sequence[Mapping[str, str | None]]) -> FaultRule | None:
        """Count one request against every rule it matches; return the first that fires.

        ``candidates`` are the request's match values (several for an SMTP message with
        several recipients: a rule matches if any of them does).
        """
        chosen: _Armed | None = None
        for armed in self._armed:
            if not any(armed.rule.matches(values) for values in candidates):
                continue
            armed.matched += 1
            if not armed.rule.applies_to(armed.matched):
                continue
            # Draw for every eligible request, so one rule's dice never depend on others.
            fires = armed.rule.probability is None or armed.rng.random() < armed.rule.probability
            if fires and chosen is None:
                chosen = armed
        if chosen is None:
            return None
        chosen.fired += 1
        return chosen.rule

    def stats(self) -> list[dict[str, Any]]:
        """The armed rules in order, with how many requests each matched and was applied to."""
        return [
            {"rule": a.rule.to_json(), "matched": a.matched, "fired": a.fired} for a in self._armed
        ]
