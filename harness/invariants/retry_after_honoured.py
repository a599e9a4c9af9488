"""``retry_after_honoured``: no retry of a delivery reaches the provider before the Retry-After
of the answer it follows.

A provider that throttles (``429``) or is overloaded (``503``) with ``Retry-After: N`` says
when it will take the request again; a worker that comes back sooner gets throttled again,
burns its attempts and, against a real provider, its credential's rate limit. Judged from the
provider's log alone, on the provider's clock (both requests are stamped by it): for every
request whose answer carried a Retry-After, the next request of the same delivery (same
delivery id, else the same run and recipient) must arrive at least that many seconds later.

The worker's settings play no part (its backoff schedule is ``retry_within_window``'s
``policy_outlook``): only what it did. An answer with no Retry-After sets no floor here. A
provider log that could not be read is *unknown*.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from harness.invariants._evidence import effect_evidence
from harness.invariants._model import CheckResult, EffectRow, Observation, Status, need, recipient

NAME = "retry_after_honoured"

#: how many early retries the evidence lists
_SHOWN = 10


def _delivery(obs: Observation, eff: EffectRow) -> tuple[str, ...]:
    if eff.delivery_id:
        return ("delivery", eff.delivery_id)
    return ("recipient", eff.run_id, recipient(obs, eff.destination))


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    requests: dict[tuple[str, ...], list[EffectRow]] = {}
    for eff in sorted(effects, key=lambda e: (e.received_at, e.seq)):
        requests.setdefault(_delivery(obs, eff), []).append(eff)
    early: list[dict[str, Any]] = []
    floors = 0
    margins: list[float] = []
    for sent in requests.values():
        for before, after in pairwise(sent):
            if before.retry_after_s is None:
                continue
            floors += 1
            waited = after.received_at - before.received_at
            margins.append(waited - before.retry_after_s)
            if waited < before.retry_after_s:
                early.append(
                    {
                        "delivery_id": after.delivery_id or before.delivery_id,
                        "answer": before.status_code,
                        "retry_after_s": before.retry_after_s,
                        "waited_s": round(waited, 6),
                        "throttled_request": effect_evidence(before, obs),
                        "retry": effect_evidence(after, obs),
                    }
                )
    evidence: dict[str, Any] = {
        "retries_after_a_retry_after": floors,
        "least_margin_s": round(min(margins), 6) if margins else None,
        "early": early[:_SHOWN],
    }
    if early:
        first = early[0]
        return CheckResult(
            Status.FAIL,
            f"{len(early)} retry(ies) came before the provider's Retry-After (e.g. "
            f"{first['delivery_id']}: {first['answer']} with Retry-After "
            f"{first['retry_after_s']:g}s, retried {first['waited_s']:g}s later)",
            evidence,
        )
    if not floors:
        return CheckResult(
            Status.PASS, "no answer with a Retry-After was followed by a retry", evidence
        )
    return CheckResult(
        Status.PASS, f"{floors} retry(ies) each waited the provider's Retry-After", evidence
    )
