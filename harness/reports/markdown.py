"""Markdown for a CI step summary: verdict first, then the matrix, the failures, coverage.

``cat reports/report.md >> "$GITHUB_STEP_SUMMARY"``. Evidence is cut so a large campaign stays
well under a step summary's size limit; the JSON keeps all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.invariants import fixes
from harness.reports._common import (
    LOOK_SYMBOL,
    SYMBOL,
    accepted_cell,
    by_look,
    case_where,
    compact,
    duplicated_destinations,
    duplicates,
    effects_line,
    headline,
    invariant_names,
    judged_sentence,
    look,
    lost,
    lost_sentence,
    not_judged_groups,
    not_passing,
    partial_note,
    provider_reasons,
    reason,
    recovery_sentence,
    repeat_sentence,
    straggler_lines,
    workers_line,
)

_ICON = {"fail": "❌", "unknown": "⚠️", "gap": "❌", "pass": "✅", "partial": "⏸️"}
#: failing cases shown in full; the rest are listed by id (the JSON and HTML have them all)
MAX_DETAILED = 25
#: cases named per provider reason (the rest are counted)
MAX_REASON_CASES = 8
#: evidence per invariant, as one line of compact JSON
EVIDENCE_CHARS = 600
#: straggler sentences listed (a campaign of a daemonising worker has one per case)
MAX_STRAGGLERS = 20


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    level, sentence = headline(report)
    lines = [f"# crash-harness report: `{report['system']}` on {report['database']}", ""]
    note = partial_note(report)
    if note:
        lines += [f"> ⏸️ **{note}**", ""]
    lines += [f"{_ICON[level]} **{sentence}**", "", f"Judged: {judged_sentence(report)}", ""]
    recovered = recovery_sentence(report)
    if recovered:
        lines += [recovered[:1].upper() + recovered[1:], ""]
    if s["invariants_violated"]:
        lines += [
            "Invariants violated: " + ", ".join(f"`{n}`" for n in s["invariants_violated"]),
            "",
        ]
    meta = [
        f"seed `{report['seed']}`",
        f"{s['cases']} case(s)"
        + (f" in {report['duration_s']:.1f}s" if "duration_s" in report else ""),
        f"boundaries covered {s['boundaries_covered']}/{s['boundaries_documented']}",
        f"crash-harness {report['tool']['version']}",
        f"schema `{report['schema']}`",
    ]
    if report.get("expected_violation"):
        meta.insert(1, f"expected to break `{report['expected_violation']}`")
    lines += [" · ".join(meta), ""]
    left = straggler_lines(report)
    if left:
        lines += [
            f"⚠️ **Stragglers ({len(left)})**: processes that outlived their worker or case"
            " (their case cannot pass)",
            "",
        ]
        lines += [f"- {_cell(line)}" for line in left[:MAX_STRAGGLERS]]
        if len(left) > MAX_STRAGGLERS:
            lines.append(f"- … and {len(left) - MAX_STRAGGLERS} more (report.json)")
        lines.append("")
    lines += _matrix(report)
    bad = not_passing(report)
    if bad:
        lines += [f"## Cases that did not pass ({len(bad)})", ""]
    for case in bad[:MAX_DETAILED]:
        lines += _case(case)
    if len(bad) > MAX_DETAILED:
        rest = ", ".join(f"`{c['id']}`" for c in bad[MAX_DETAILED:])
        lines += [f"Also not passing (details in report.json / report.html): {rest}", ""]
    lines += _refusals(report)
    lines += _coverage(report)
    lines += _determinism(report)
    if report.get("replay"):
        lines += ["## Rerun the campaign", "", "```sh", report["replay"], "```", ""]
    return "\n".join(lines)


def _matrix(report: Mapping[str, Any]) -> list[str]:
    names = invariant_names(report)
    lines = [
        "## Boundary \u00d7 invariant",
        "",
        "| boundary | verdict | " + " | ".join(names) + " | accepted/intended | time |",
        "|---|---|" + "---|" * len(names) + "---|---:|",
    ]
    for case in report["cases"]:
        where = case_where(case)
        if case["fault"] not in ("none", "crash"):
            where = f"{case['fault']}@{where}"
        cells = [
            LOOK_SYMBOL[look(case["invariants"][n])] if n in case["invariants"] else "-"
            for n in names
        ]
        fx = case["effects"]
        lines.append(
            f"| `{where}` | {SYMBOL[case['verdict']]} {case['verdict']} | "
            + " | ".join(cells)
            + f" | {accepted_cell(fx)} | {float(case['duration_s']):.2f}s |"
        )
    lines += [
        "",
        "✅ holds · ❌ failed · ⚠️ undecided · ⚪ not judged (the system gave nothing to judge it"
        " by, e.g. no ledger adapter; not a failure) · - not checked",
        "",
    ]
    return lines


def _refusals(report: Mapping[str, Any]) -> list[str]:
    """What the providers refused, and why, in every case (passing ones included)."""
    said = provider_reasons(report)
    if not said:
        return []
    lines = ["## What the providers refused, and why", ""]
    for text, cases in said:
        where = ", ".join(f"`{c}`" for c in cases[:MAX_REASON_CASES])
        more = f" and {len(cases) - MAX_REASON_CASES} more" if len(cases) > MAX_REASON_CASES else ""
        lines.append(f"- {_cell(text)} (in {where}{more})")
    return [*lines, ""]


def _case(case: Mapping[str, Any]) -> list[str]:
    lines = [f"### {SYMBOL[case['verdict']]} `{case['id']}`: {case['verdict']}", ""]
    groups = by_look(case)
    for name, inv in groups["fail"]:
        lines.append(f"- ❌ failed **{name}**: {reason(inv)}")
        agent = fixes.is_agent(case.get("boundaries_reached") or {})
        fix = fixes.usual_fix(name, agent=agent)
        if fix:
            where = "docs/agents.md" if agent and name in fixes.AGENT_FIXES else fixes.link(name)
            lines.append(f"  - fix: {fix} ([{where}]({where}))")
    lines += [f"- ⚠️ undecided **{name}**: {reason(inv)}" for name, inv in groups["undecided"]]
    lines += [
        f"- ⚪ not judged: {why}: " + ", ".join(f"`{n}`" for n in names)
        for why, names in not_judged_groups(case)
    ]
    dups = duplicates(case)
    if dups:
        lines.append("- duplicated: " + ", ".join(f"`{d}`" for d in duplicated_destinations(case)))
        lines += [f"  - {_cell(repeat_sentence(d))}" for d in dups]
    lines += [f"- lost: {lost_sentence(row)}" for row in lost(case)]
    lines.append(f"- workers: {workers_line(case)}")
    lines.append(f"- provider: {effects_line(case)}")
    for note in case["notes"]:
        lines.append(f"- note: {note}")
    if case.get("runs"):
        said = ", then ".join(str(r["verdict"]) for r in case["runs"])
        lines.append(f"- runs of this schedule (same seed): {said}")
        lines += [
            f"  - {r['verdict']}: trace `{r['trace']}`" for r in case["runs"] if r.get("trace")
        ]
    lines.append("")
    evidence = {
        n: inv["evidence"]
        for n, inv in case["invariants"].items()
        if look(inv) in ("fail", "undecided") and inv["evidence"]
    }
    if evidence:
        lines += ["<details><summary>evidence</summary>", "", "```"]
        lines += [f"{n}: {compact(ev, limit=EVIDENCE_CHARS)}" for n, ev in evidence.items()]
        lines += ["```", "", "</details>", ""]
    lines += ["Replay:", "", "```sh", case["replay"], "```", ""]
    return lines


def _coverage(report: Mapping[str, Any]) -> list[str]:
    s = report["summary"]
    lines: list[str] = []
    entries = report.get("coverage")
    if entries:
        lines += [
            f"## Coverage: {s['boundaries_covered']}/{s['boundaries_documented']} boundaries",
            "",
            "| boundary | crash landed | hits reached | where |",
            "|---|---|---:|---|",
        ]
        for e in entries:
            if e["covered"]:
                landed = "✅"
            elif e.get("pending"):
                landed = "⏸️ not run yet"
            elif e.get("planned", True):
                landed = "❌ never"
            else:
                landed = "- not in this campaign"
            lines.append(
                f"| `{e['boundary']}` | {landed} | {e['hits_reached']} | "
                f"{_cell(e.get('description', ''))} |"
            )
        lines.append("")
    explored = report.get("explore")
    if isinstance(explored, Mapping) and "boundaries_unreached" in explored:
        unreached = ", ".join(f"`{b}`" for b in explored["boundaries_unreached"]) or "none"
        unfaulted = ", ".join(f"`{b}`" for b in explored["boundaries_never_faulted"]) or "none"
        lines += [
            f"Explore: no schedule reached {unreached}; reached, but no fault landed on"
            f" {unfaulted}.",
            "",
        ]
    if s["boundaries_uncovered"]:
        lines += [
            "### Coverage gap",
            "",
            "No crash landed on: " + ", ".join(f"`{b}`" for b in s["boundaries_uncovered"]),
            "",
        ]
    return lines


def _determinism(report: Mapping[str, Any]) -> list[str]:
    entries = report.get("determinism") or []
    if not entries:
        return []
    lines = ["## Determinism sample", "", "| case | first | rerun | same |", "|---|---|---|---|"]
    for d in entries:
        lines.append(
            f"| `{d['case']}` | {d['first']} | {d['rerun']} | {'✅' if d['agree'] else '❌'}"
            + (f" {d['differs']} |" if d.get("differs") else " |")
        )
    return [*lines, ""]
