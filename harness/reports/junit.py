"""JUnit XML: one ``<testcase>`` per case, so any CI lists crash cases like unit tests.

``classname`` is the system under test, ``name`` the case (``baseline`` or
``fault@boundary#hit``). A violated invariant is a ``<failure>`` whose ``type`` is the
invariant and whose text carries its evidence as compact JSON; an undecided case is an
``<error>`` with the reason; a planned case that a partial report never reached is
``<skipped>``; a documented boundary no crash landed on is one more failing testcase. An
invariant the system gave nothing to judge by (``[not judged]``: no ledger adapter) is never a
failure or an error: it is a ``not_judged`` property of its testcase and a line of its
``<system-out>``. A
planned step that did not land is a ``coverage_gap`` failure, except in an explore report:
there the schedules were drawn, not planned, and one that did not land tested nothing, so it
is ``<skipped>`` (the rule ``harness.reports.outcome`` applies to the exit status).
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from harness.invariants import fixes
from harness.reports._common import (
    by_look,
    case_straggler_lines,
    case_where,
    compact,
    duplicated_destinations,
    duplicates,
    effects_line,
    judged_sentence,
    lost,
    lost_sentence,
    not_judged_groups,
    reason,
    repeat_sentence,
    straggler_lines,
    workers_line,
)

EVIDENCE_CHARS = 20_000
#: characters XML 1.0 cannot carry (a worker's stderr may hold any byte)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _safe(root: ET.Element) -> None:
    for el in root.iter():
        if el.text:
            el.text = _NOT_XML.sub("\ufffd", el.text)
        for key, value in el.attrib.items():
            el.set(key, _NOT_XML.sub("\ufffd", value))


def render_junit(report: Mapping[str, Any]) -> str:
    system = str(report["system"])
    suite_name = f"crash-harness {system} ({report['database']}, seed {report['seed']})"
    suite = ET.Element("testsuite", name=suite_name)
    props = ET.SubElement(suite, "properties")
    for key in ("seed", "system", "database", "expected_violation", "schema", "partial"):
        if report.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=str(report[key]))
    ET.SubElement(props, "property", name="version", value=str(report["tool"]["version"]))
    ET.SubElement(props, "property", name="judged", value=judged_sentence(report))
    left = straggler_lines(report)
    if left:
        ET.SubElement(props, "property", name="stragglers", value=str(len(left)))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for case in report["cases"]:
        counts["tests"] += 1
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=system,
            name=str(case["id"]),
            time=f"{float(case['duration_s']):.3f}",
        )
        _fill(tc, case, counts, drawn=report.get("explore") is not None)
    done = {c["id"] for c in report["cases"]}
    for case_id in report.get("plan", {}).get("cases", []):
        if case_id in done:
            continue
        counts["tests"] += 1
        counts["skipped"] += 1
        tc = ET.SubElement(suite, "testcase", classname=system, name=str(case_id), time="0")
        ET.SubElement(tc, "skipped", message="not run: the campaign stopped before this case")
    uncovered = report["summary"].get("boundaries_uncovered") or []
    if uncovered:
        counts["tests"] += 1
        counts["failures"] += 1
        tc = ET.SubElement(suite, "testcase", classname=system, name="boundary coverage", time="0")
        failure = ET.SubElement(
            tc,
            "failure",
            type="coverage_gap",
            message="no crash landed on: " + ", ".join(uncovered),
        )
        failure.text = compact({"boundaries_uncovered": uncovered})
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{float(report.get('duration_s', 0.0)):.3f}")
    suite.set("timestamp", _iso(report.get("started_at")))
    root = ET.Element("testsuites", name="crash-harness")
    for key, value in counts.items():
        root.set(key, str(value))
    root.set("time", suite.get("time", "0"))
    root.append(suite)
    _safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _fill(tc: ET.Element, case: Mapping[str, Any], counts: dict[str, int], *, drawn: bool) -> None:
    groups = by_look(case)
    failed = dict(groups["fail"])
    #: only what a checker could not decide; a not-judged check is no reason for an error
    unknown = dict(groups["undecided"])
    blind = not_judged_groups(case)
    left = case_straggler_lines(case)
    if blind or left:  # first, as JUnit readers that take testcase properties expect
        props = ET.SubElement(tc, "properties")
    if blind:
        names = [n for _, group in blind for n in group]
        ET.SubElement(props, "property", name="not_judged", value=", ".join(names))
        for why, group in blind:
            ET.SubElement(
                props, "property", name="not_judged_because", value=f"{why}: {', '.join(group)}"
            )
    for line in left:
        ET.SubElement(props, "property", name="straggler", value=line)
    # a flaky case one of whose runs failed: that failure stands (``outcome.judge``)
    if case["verdict"] == "fail" or (case["verdict"] == "flaky" and failed):
        counts["failures"] += 1
        names = list(failed) or ["verdict"]
        message = "; ".join(f"{n}: {r['summary']}" for n, r in failed.items()) or "case failed"
        if case["verdict"] == "flaky":
            runs = ", then ".join(str(r["verdict"]) for r in case.get("runs", []))
            message = f"flaky, a failure stands: runs of this schedule gave {runs}; {message}"
        failure = ET.SubElement(tc, "failure", type=",".join(names), message=message)
        failure.text = _evidence_text(failed, unknown, case)
    elif case["verdict"] == "gap":
        missed = [
            f"{x['step']}: {x['detail']}"
            for x in case.get("landings", [])
            if x.get("landing") in ("not_reached", "unconfirmed")
        ]
        if drawn:
            counts["skipped"] += 1
            ET.SubElement(
                tc,
                "skipped",
                message="drawn schedule did not land: " + ("; ".join(missed) or "(no detail)"),
            )
        else:
            counts["failures"] += 1
            failure = ET.SubElement(
                tc,
                "failure",
                type="coverage_gap",
                message="planned step did not land: " + ("; ".join(missed) or "(no detail)"),
            )
            failure.text = _evidence_text({}, unknown, case)
    elif case["verdict"] in ("unknown", "flaky"):
        counts["errors"] += 1
        reasons = [f"{n}: {r['summary']}" for n, r in unknown.items()] + list(case["notes"])
        if case["verdict"] == "flaky":  # no run failed: an error (it is undecided)
            runs = ", then ".join(str(r["verdict"]) for r in case.get("runs", []))
            reasons.insert(0, f"flaky: runs of this schedule disagreed ({runs})")
        error = ET.SubElement(
            tc,
            "error",
            type="inconclusive",
            message="; ".join(reasons) or "the case could not be decided",
        )
        error.text = _evidence_text({}, unknown, case)
    out = [f"case: {case['id']} ({case_where(case)})", f"replay: {case['replay']}"]
    out.append(f"workers: {workers_line(case)}")
    out.append(f"provider: {effects_line(case)}")
    out += [f"note: {n}" for n in case["notes"]]
    out += [f"straggler: {line}" for line in left]
    out += [f"not judged (not a failure): {why}: {', '.join(names)}" for why, names in blind]
    ET.SubElement(tc, "system-out").text = "\n".join(out) + "\n"
    tails = [
        f"--- {w['worker']} (pid {w['pid']}, {w['outcome']})\n"
        + (w.get("stack_dump") or w["stderr_tail"])
        for w in case.get("workers", [])
        if w.get("stack_dump")
        or (w["outcome"] in ("died", "hung", "killed_unplanned") and w["stderr_tail"])
    ]
    if tails:
        ET.SubElement(tc, "system-err").text = "\n".join(tails)


def _evidence_text(
    failed: Mapping[str, Any], unknown: Mapping[str, Any], case: Mapping[str, Any]
) -> str:
    lines = []
    for name, r in failed.items():
        lines.append(f"{name} (fail): {r['summary']}")
        said = fixes.fix_line(name)
        if said:
            lines.append(said)
        lines.append(f"evidence: {compact(r['evidence'], limit=EVIDENCE_CHARS)}")
    for name, r in unknown.items():
        lines.append(f"{name} (undecided): {reason(r)}")
        lines.append(f"evidence: {compact(r['evidence'], limit=EVIDENCE_CHARS)}")
    if failed:
        dups = duplicates(case)
        if dups:
            lines.append("duplicated: " + ", ".join(duplicated_destinations(case)))
            lines += [f"  {repeat_sentence(d)}" for d in dups]
        lines += [f"lost: {lost_sentence(row)}" for row in lost(case)]
    lines += [f"note: {n}" for n in case["notes"]]
    lines.append(f"replay: {case['replay']}")
    return "\n".join(lines) + "\n"


def _iso(ts: Any) -> str:
    try:
        moment = dt.datetime.fromtimestamp(float(ts), tz=dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        moment = dt.datetime.now(tz=dt.UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="seconds")
