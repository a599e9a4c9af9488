"""Reports: the JSON contract (``crash-harness/report/v1``) and what is rendered from it.

- ``_contract``: build, summarise, validate and read the JSON; write files atomically;
- ``_timeline``: per-case timeline events (``build_timeline``) from trace, effects, ledger;
- ``markdown``, ``junit``, ``html``: one renderer each, every one a function of the JSON only;
- ``_svg``: the timeline picture, a hand-written inline SVG (no plotting library);
- ``_live``: the report a running ``certify`` rewrites after every case, and ``--resume``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.engine.store.timeline import build_timeline, timeline_from_workdir
from harness.reports._contract import (
    SCHEMA,
    ReportError,
    assemble,
    case_json,
    dumps,
    json_schema,
    load_report,
    schema_errors,
    summarise,
    summary_of,
    to_json,
    validate,
    write_atomic,
)
from harness.reports.junit import render_junit
from harness.reports.markdown import render_markdown

if TYPE_CHECKING:
    from harness.engine.results import CampaignResult

#: file name per format, as ``certify`` writes them side by side
FILES: dict[str, str] = {
    "json": "report.json",
    "md": "report.md",
    "junit": "report.xml",
    "html": "report.html",
}


def render_html(
    report: Mapping[str, Any], *, svg_cache: MutableMapping[str, str] | None = None
) -> str:
    from harness.reports.html import render_html as _render

    return _render(report, svg_cache=svg_cache)


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "json": dumps,
    "md": render_markdown,
    "junit": render_junit,
    "html": render_html,
}


def write_all(
    report: Mapping[str, Any],
    report_dir: Path,
    *,
    svg_cache: MutableMapping[str, str] | None = None,
) -> dict[str, Path]:
    """Write every format of one report JSON into ``report_dir``, the JSON first."""
    paths = {fmt: report_dir / name for fmt, name in FILES.items()}
    write_atomic(paths["json"], dumps(report))
    write_atomic(paths["md"], render_markdown(report))
    write_atomic(paths["junit"], render_junit(report))
    write_atomic(paths["html"], render_html(report, svg_cache=svg_cache))
    return paths


def write_reports(result: CampaignResult, report_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md, report.xml (JUnit) and report.html for a campaign."""
    return write_all(to_json(result), report_dir)


__all__ = [
    "FILES",
    "RENDERERS",
    "SCHEMA",
    "ReportError",
    "assemble",
    "build_timeline",
    "case_json",
    "dumps",
    "json_schema",
    "load_report",
    "render_html",
    "render_junit",
    "render_markdown",
    "schema_errors",
    "summarise",
    "summary_of",
    "timeline_from_workdir",
    "to_json",
    "validate",
    "write_all",
    "write_atomic",
    "write_reports",
]
