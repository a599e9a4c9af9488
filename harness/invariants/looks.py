"""One rule for what an invariant result means to a reader: failed, undecided, not judged, held.

A checker answers *pass*, *fail* or *unknown*; an *unknown* whose summary starts
``[not judged]`` is a blind spot of the system under test (no ledger adapter, no audit
query), neither a finding nor an undecided case. The console case line, every report
format, the pytest failure message, a case's verdict and a campaign's exit status all ask
this module, so a result never reads as failed on one route and undecided on another.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


#: a not-judged reason names the ledger part first ("ledger audit: why"); grouped by the why
_PART = re.compile(r"^ledger [a-z ]+: ")


def reason(summary: str) -> str:
    """A summary without the ``[not judged]`` tag its look already says."""
    if summary.startswith(NOT_JUDGED):
        summary = summary[len(NOT_JUDGED) :].strip()
    return summary


def why_not_judged(summary: str) -> str:
    """The reason a check was not judged, without the ledger part it names first: a system
    without a ledger adapter leaves seven checks blind for one reason, said once."""
    return _PART.sub("", reason(summary)) or "no evidence"


@dataclass(frozen=True)
class Judged:
    """How many invariants a campaign judged, and why the rest were not (#26: a pass over
    checks the system gave nothing to judge by must say so)."""

    #: invariants judged in every case that checked them
    judged: tuple[str, ...]
    #: ``(why, names)`` for the rest, one entry per distinct why
    not_judged: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def total(self) -> int:
        return len(self.judged) + sum(len(names) for _, names in self.not_judged)

    def sentence(self) -> str:
        """``6 of 13 invariant(s) judged; not judged: a, b (why)``; every one judged says so."""
        if not self.not_judged:
            return f"all {self.total} invariant(s) judged"
        blind = "; ".join(f"{', '.join(names)} ({why})" for why, names in self.not_judged)
        return f"{len(self.judged)} of {self.total} invariant(s) judged; not judged: {blind}"

    def to_json(self) -> dict[str, Any]:
        return {
            "invariants_judged": list(self.judged),
            "invariants_not_judged": [
                {"why": why, "invariants": list(names)} for why, names in self.not_judged
            ],
        }


def judged(cases: Iterable[Mapping[str, Any]], names: Iterable[str] | None = None) -> Judged:
    """What the report's ``cases`` judged; ``names`` limits it (a campaign's ``hold``). An
    invariant not judged in any case counts as not judged, under the first reason given."""
    chosen = set(names) if names is not None else None
    order: list[str] = []
    blind: dict[str, str] = {}
    for case in cases:
        for name, result in case.get("invariants", {}).items():
            if chosen is not None and name not in chosen:
                continue
            if name not in order:
                order.append(name)
            if name not in blind and look(result) == "not_judged":
                blind[name] = why_not_judged(str(result.get("summary", "")))
    groups: dict[str, list[str]] = {}
    for name in order:
        if name in blind:
            groups.setdefault(blind[name], []).append(name)
    return Judged(
        judged=tuple(n for n in order if n not in blind),
        not_judged=tuple((why, tuple(group)) for why, group in groups.items()),
    )
