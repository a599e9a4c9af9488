"""Several providers per campaign: each named, with its own preset, window, options, faults.

A real worker notifies several surfaces for one result (a webhook and an e-mail for one
order), and the duplicate that matters most is the one a crash between two sends leaves. So
a scenario may name several providers (``[provider.webhook]``, ``[provider.mail]``); the
campaign starts each one, opens, drains and audits its epoch in every case, watches it for
death, and judges effects per (run, destination) across all of them.

A scenario with a single ``[provider]`` table has one provider named after its preset
(``payments``, ``smtp``, ...): its notes, reports and fault ids read as they always did, and
no step has to name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from harness.destinations import rule_for

#: what a provider may be called: it appears in case ids (``provider_5xx@mail``) and, upper
#: cased, in environment variable names
NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class ProviderSpec:
    """One provider a campaign runs: the scenario's ``[provider.NAME]`` table."""

    name: str
    preset: str
    #: the dedupe window (None: the preset's default)
    window_s: float | None = None
    #: the preset's per-instance options (``docs/providers.md``)
    options: dict[str, Any] = field(default_factory=dict)
    #: fault rules in the admin API's JSON shape (None: the workload's default faults)
    faults: tuple[dict[str, Any], ...] | None = None


def comparison_surface(presets: list[str]) -> str | None:
    """The surface whose normal form compares a case's destinations (``Policy.surface``).

    One form for the whole case, so an intended destination and the effect that reached it
    always compare alike: the providers' shared form, or (an e-mail provider beside an
    opaque-id one) the opaque form, which folds the least and so never invents a duplicate
    or a loss; it may miss a duplicate spelled in another case."""
    if not presets:
        return None
    if len({rule_for(p) for p in presets}) == 1:
        return presets[0]
    return None
