"""Write a campaign's report: JSON (the contract, ``crash-harness/report/v1``) and Markdown.

Every other format is rendered from the JSON, never from live objects, so a report can be
re-rendered later and the formats cannot drift apart. Files are written atomically (temp file
and rename) so a reader never sees half a report.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import __version__
from harness.campaign import CampaignResult
from harness.invariants import CHECKERS, Status

SCHEMA = "crash-harness/report/v1"


def to_json(result: CampaignResult) -> dict[str, Any]:
    cases = [c.to_json() for c in result.cases]
    system = result.settings.system
    return {
        "schema": SCHEMA,
        "tool": {"name": "crash-harness", "version": __version__},
        "seed": result.settings.seed,
        "system": system.name,
        "expected_violation": system.expected_violation,
        "database": result.database_kind,
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "workdir": str(result.workdir) if result.workdir else None,
        "cases": cases,
        "summary": summarise(result),
    }


def summarise(result: CampaignResult) -> dict[str, Any]:
    verdicts = [c.verdict for c in result.cases]
    violated = sorted(
        {name for c in result.cases for name, r in c.invariants.items() if r.status is Status.FAIL}
    )
    return {
        "cases": len(verdicts),
        "passed": verdicts.count(Status.PASS),
        "failed": verdicts.count(Status.FAIL),
        "unknown": verdicts.count(Status.UNKNOWN),
        "boundaries_documented": len(result.settings.system.boundaries),
        "boundaries_covered": len(result.covered()),
        "boundaries_uncovered": result.uncovered(),
        "invariants_checked": list(CHECKERS),
        "invariants_violated": violated,
    }


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    if s["failed"]:
        headline = f"❌ **{s['failed']} of {s['cases']} case(s) violate an invariant**"
    elif s["unknown"]:
        headline = f"⚠️ **inconclusive: {s['unknown']} of {s['cases']} case(s) undecided**"
    elif s["boundaries_uncovered"]:
        headline = "❌ **coverage gap: some documented boundaries were never reached**"
    else:
        headline = f"✅ **all {s['cases']} case(s) hold every invariant**"
    lines = [
        f"# crash-harness report: `{report['system']}` on {report['database']}",
        "",
        headline,
        "",
        f"seed `{report['seed']}` · boundaries covered {s['boundaries_covered']}"
        f"/{s['boundaries_documented']} · schema `{report['schema']}`",
        "",
    ]
    if s["invariants_violated"]:
        lines += [
            "Invariants violated: " + ", ".join(f"`{n}`" for n in s["invariants_violated"]),
            "",
        ]
    names = s["invariants_checked"]
    symbol = {"pass": "✅", "fail": "❌", "unknown": "⚠️"}
    lines.append("| case | verdict | " + " | ".join(names) + " | accepted/intended |")
    lines.append("|---|---|" + "---|" * len(names) + "---|")
    for case in report["cases"]:
        cells = [
            symbol[case["invariants"][n]["status"]] if n in case["invariants"] else "-"
            for n in names
        ]
        fx = case["effects"]
        lines.append(
            f"| `{case['id']}` | {case['verdict']} | "
            + " | ".join(cells)
            + f" | {fx['accepted']}/{fx['intended']} |"
        )
    lines.append("")
    bad = [c for c in report["cases"] if c["verdict"] != "pass"]
    if bad:
        lines += ["## Cases that did not pass", ""]
    for case in bad:
        lines += [f"### `{case['id']}`: {case['verdict']}", ""]
        for name, inv in case["invariants"].items():
            if inv["status"] != "pass":
                lines.append(f"- **{name}** ({inv['status']}): {inv['summary']}")
        for note in case["notes"]:
            lines.append(f"- note: {note}")
        lines += ["", "Replay:", "", "```sh", case["replay"], "```", ""]
    if s["boundaries_uncovered"]:
        lines += [
            "## Coverage gap",
            "",
            "No crash landed on: " + ", ".join(f"`{b}`" for b in s["boundaries_uncovered"]),
            "",
        ]
    return "\n".join(lines)


def write_reports(result: CampaignResult, report_dir: Path) -> dict[str, Path]:
    data = to_json(result)
    paths = {"json": report_dir / "report.json", "md": report_dir / "report.md"}
    write_atomic(paths["json"], json.dumps(data, indent=2, sort_keys=False) + "\n")
    write_atomic(paths["md"], render_markdown(data))
    return paths
