"""What every rendered format says the same way: the headline, the matrix, case labels."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

SYMBOL = {"pass": "✅", "fail": "❌", "unknown": "⚠️", "gap": "🕳️", "flaky": "🔀", None: "-"}


def headline(report: Mapping[str, Any]) -> tuple[str, str]:
    """``(level, sentence)``: level is ``fail``, ``unknown``, ``gap`` or ``pass``."""
    s = report["summary"]
    partial = " so far" if report.get("partial") else ""
    if s["failed"]:
        return "fail", f"{s['failed']} of {s['cases']} case(s) violate an invariant{partial}"
    if s.get("gaps"):
        return "gap", (
            f"coverage gap: in {s['gaps']} of {s['cases']} case(s) a planned step did not land"
            f"{partial}"
        )
    if s["boundaries_uncovered"]:
        return "gap", "coverage gap: some documented boundaries were never reached"
    sweep = report.get("sweep")
    if isinstance(sweep, Mapping) and (
        sweep.get("pairs_missing") or sweep.get("boundaries_unreached")
    ):
        return "gap", "coverage gap: the sweep missed pairs or boundaries its plan promised"
    if s["unknown"] or s.get("flaky"):
        why = [f"{s['unknown']} of {s['cases']} case(s) undecided"] if s["unknown"] else []
        if s.get("flaky"):  # it failed, then passed on a rerun: no verdict either way
            why.append(f"{s['flaky']} of {s['cases']} case(s) flaky (failed, then passed on rerun)")
        return "unknown", f"inconclusive: {'; '.join(why)}{partial}"
    if report.get("partial"):
        return "partial", f"all {s['cases']} case(s) run so far hold every invariant"
    return "pass", f"all {s['cases']} case(s) hold every invariant"


def partial_note(report: Mapping[str, Any]) -> str | None:
    """The sentence that says a report is partial, and how to finish it; None if complete."""
    if not report.get("partial"):
        return None
    s = report["summary"]
    planned = len(report.get("plan", {}).get("cases", [])) or s["cases"] + s.get("not_run", 0)
    text = (
        f"partial report: {s['cases']} of {planned} planned case(s) ran before the campaign stopped"
    )
    if report.get("resume"):
        text += f"; finish it with `{report['resume']}`"
    return text


def invariant_names(report: Mapping[str, Any]) -> list[str]:
    names = list(report["summary"].get("invariants_checked", []))
    for case in report["cases"]:
        names += [n for n in case["invariants"] if n not in names]
    return names


def case_where(case: Mapping[str, Any]) -> str:
    """``boundary#hit`` for a single crash, ``baseline``, else the case id itself."""
    case_id = str(case["id"])
    if case.get("boundary") is not None and case_id == f"crash@{case['boundary']}#{case['hit']}":
        return f"{case['boundary']}#{case['hit']}"
    return case_id


def not_passing(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in report["cases"] if c["verdict"] != "pass"]


def compact(value: Any, *, limit: int | None = None) -> str:
    """Compact, key-sorted JSON; cut at ``limit`` characters with a marker."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    if limit is not None and len(text) > limit:
        return text[:limit] + f"… ({len(text) - limit} more characters)"
    return text


def workers_line(case: Mapping[str, Any]) -> str:
    parts = []
    for w in case.get("workers", []):
        how = str(w["outcome"])
        if w["outcome"] == "crashed_as_planned" and w.get("boundary"):
            how = f"killed at {w['boundary']}#{w['hit']}"
        elif w.get("signal"):
            how += f" by {w['signal']}"
        elif w.get("exit_code"):
            how += f" with exit code {w['exit_code']}"
        parts.append(f"{w['worker']} (pid {w['pid']}) {how} after {float(w['duration_s']):.2f}s")
    return " → ".join(parts)


def effects_line(case: Mapping[str, Any]) -> str:
    fx = case["effects"]
    text = f"{fx['accepted']} accepted of {fx['intended']} intended"
    by = fx.get("by_outcome")
    if by:
        text += " (" + ", ".join(f"{n} {k}" for k, n in sorted(by.items())) + ")"
    return text
