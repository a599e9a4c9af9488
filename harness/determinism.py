"""The determinism check: rerun a sample of passing cases with the same seed and compare.

A harness whose verdicts depend on scheduling luck cannot gate CI. The shared clock jumps
instead of sleeping and every choice comes from the seed, so a rerun must agree; the report
carries the sample so a reader can see that it did (and which case did not, if any).
"""

from __future__ import annotations

import random
from typing import Any

from harness.campaign import Campaign, CaseResult
from harness.invariants import Status


def _signature(result: CaseResult) -> dict[str, str]:
    return {name: check.status.value for name, check in result.invariants.items()}


def rerun_sample(
    campaign: Campaign, results: list[CaseResult], *, size: int, seed: int
) -> list[dict[str, Any]]:
    """Rerun up to ``size`` passing cases (chosen from ``seed``); one record per rerun."""
    passing = [r for r in results if r.verdict is Status.PASS]
    chosen = random.Random(seed).sample(passing, k=min(size, len(passing)))
    sample = []
    for first in chosen:
        again = campaign.run(first.spec, slug_prefix="determinism")
        sample.append(
            {
                "case": first.spec.id,
                "first": first.verdict.value,
                "rerun": again.verdict.value,
                "agree": first.verdict is again.verdict and _signature(first) == _signature(again),
                "accepted": [first.accepted, again.accepted],
            }
        )
    return sample
