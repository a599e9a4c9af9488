"""The provider's own word on a case's refused and unattributed requests (and on requests
an open receiver took without a credential), for its notes.

A worker's log says ``400 Client Error: BAD REQUEST for url: ...``; the fake provider
knows why (a missing header, a key reused with other parameters and which one differed, a
destination outside the scope, a request whose run it could not read) and keeps it in the
effect log (``Effect.reason``). This puts those reasons in the case notes, counted by
reason, so a report says the cause without anyone starting a provider by hand. Injected
faults (the harness's own doing) and stale-epoch refusals are left out.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from fake_providers import Effect
from fake_providers._credentials import OPEN_CREDENTIAL_ID

#: outcomes whose reason is the provider refusing what a worker sent
REFUSALS: Final = ("rejected", "refused", "unauthenticated")
#: at most this many distinct reasons are noted per case (the total is always given)
SHOWN: Final = 3


def reason_notes(effects: list[Effect], provider: str | None = None) -> list[str]:
    """One note per distinct (outcome, status, reason), most frequent first; ``provider``
    names the provider in each note (a case with several, ``[provider.NAME]``)."""
    said = "provider" if provider is None else f"provider {provider}"
    counted = Counter(
        (
            e.outcome if not e.unattributed else f"{_said(e.outcome)}, unattributed",
            e.status_code,
            e.reason,
        )
        for e in effects
        if e.reason is not None and (e.outcome in REFUSALS or e.unattributed)
    )
    notes = [
        f"{said}: {n} request(s) {outcome} {status or ''}: {reason}".replace("  ", " ")
        for (outcome, status, reason), n in counted.most_common(SHOWN)
    ]
    unchecked = sum(1 for e in effects if e.accepted and e.credential_id == OPEN_CREDENTIAL_ID)
    if unchecked:  # what the worker sent proves nothing of its credential handling
        notes.insert(
            0,
            f"{said}: {unchecked} request(s) accepted with no credential checked:"
            " the receiver is open (open = true)",
        )
    if len(counted) > SHOWN:
        notes.append(f"{said}: {len(counted) - SHOWN} more reason(s) in the effect log")
    return notes


def _said(outcome: str) -> str:
    return "accepted" if outcome in ("fresh", "expired_then_accepted") else outcome
