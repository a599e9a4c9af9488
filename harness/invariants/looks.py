"""One rule for what an invariant result means to a reader: failed, undecided, not judged, held.

A checker answers *pass*, *fail* or *unknown*; an *unknown* whose summary starts
``[not judged]`` is a blind spot of the system under test (no ledger adapter, no audit
query), neither a finding nor an undecided case. The console case line, every report
format, the pytest failure message, a case's verdict and a campaign's exit status all ask
this module, so a result never reads as failed on one route and undecided on another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.invariants._model import NOT_JUDGED, CheckResult

#: the four looks of an invariant result, in the order a reader needs them
LOOKS = ("fail", "undecided", "not_judged", "pass")
#: the word every format uses for a look
LOOK_WORD = {
    "fail": "failed",
    "undecided": "undecided",
    "not_judged": "not judged",
    "pass": "holds",
}


def look_of_status(status: str, summary: str) -> str:
    """``fail``, ``undecided``, ``not_judged`` or ``pass`` for a status value and summary."""
    if status == "fail":
        return "fail"
    if status == "unknown":
        return "not_judged" if summary.startswith(NOT_JUDGED) else "undecided"
    return "pass"


def look(result: CheckResult | Mapping[str, Any]) -> str:
    """The look of one result: a live ``CheckResult`` or its report JSON form."""
    if isinstance(result, CheckResult):
        return look_of_status(result.status.value, result.summary)
    return look_of_status(str(result.get("status")), str(result.get("summary", "")))


def grouped(
    results: Mapping[str, CheckResult] | Mapping[str, Mapping[str, Any]],
    names: Iterable[str] | None = None,
) -> dict[str, list[str]]:
    """Invariant names by look (every look present, in ``LOOKS`` order); ``names`` limits
    which invariants count (a campaign's ``hold``)."""
    chosen = set(names) if names is not None else None
    groups: dict[str, list[str]] = {k: [] for k in LOOKS}
    for name, result in results.items():
        if chosen is None or name in chosen:
            groups[look(result)].append(name)
    return groups
