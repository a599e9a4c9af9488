"""What a campaign must know of each fake provider preset a worker may speak.

Three facts per preset, the same for every system that speaks it: the dedupe window a
worker must stay inside by default (``window_s``; None when the preset has no key or the
default is not the worker's to assume), whether it takes a window at all (``keyed``), and
whether the provider can be asked about a key after a timeout (``lookup``: the checkers'
``Policy.provider_lookup``). SMTP answers with SMTP reply codes, so the HTTP fault rules of
a scenario are restated for it (``campaign_faults``: a 5xx/429 "try again" becomes 451).

``PRESETS`` is the table; a ``System`` may declare its own (``System(presets=...)``), e.g.
a worker that does not use a preset's lookup, and ``facts_for`` reads a system's declaration
first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "PRESETS",
    "SMTP_PERMANENT",
    "SMTP_TRANSIENT",
    "PresetFacts",
    "campaign_faults",
    "facts_for",
]


@dataclass(frozen=True)
class PresetFacts:
    """One preset, as far as a campaign and its checkers must know it."""

    #: the preset's default dedupe window, seconds (None: no key, or not known here)
    window_s: float | None = None
    #: whether the preset has a dedupe window (its ``window_s`` option) at all
    keyed: bool = True
    #: whether the provider can be asked about a key after a timeout
    lookup: bool = False
    #: whether the preset answers with SMTP reply codes (fault rules are restated)
    smtp: bool = False


#: preset name -> its facts (a preset not listed: ``PresetFacts()``)
PRESETS: Mapping[str, PresetFacts] = MappingProxyType(
    {
        "payments": PresetFacts(window_s=86_400.0, lookup=True),
        "orders": PresetFacts(lookup=True),
        "queue-fifo": PresetFacts(window_s=300.0),
        "chat": PresetFacts(keyed=False),
        "smtp": PresetFacts(keyed=False, smtp=True),
        "webhook": PresetFacts(),
    }
)

#: SMTP's reply for an HTTP status fault: transient failures become 451 (try again later)
SMTP_TRANSIENT = 451
SMTP_PERMANENT = 554


def facts_for(preset: str, declared: Mapping[str, PresetFacts] | None = None) -> PresetFacts:
    """The facts of ``preset``: a system's own declaration first, then ``PRESETS``."""
    if declared is not None and preset in declared:
        return declared[preset]
    return PRESETS.get(preset, PresetFacts())


def campaign_faults(
    facts: PresetFacts, rules: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], ...]:
    """Fault rules as the preset understands them (only SMTP differs: codes on DATA)."""
    out: list[dict[str, Any]] = []
    for given in rules:
        rule = dict(given)
        if facts.smtp and rule.get("fault") == "status":
            status = int(rule.get("status") or 0)
            if status == 429 or 500 <= status < 600:
                rule["status"] = SMTP_TRANSIENT
                rule.pop("retry_after", None)
            elif 400 <= status < 500:
                rule["status"] = SMTP_PERMANENT
        out.append(rule)
    return tuple(out)
