"""Write a campaign's report: JSON (the contract, ``crash-harness/report/v1``), Markdown,
JUnit XML and HTML.

Every other format is rendered from the JSON, never from live objects, so a report can be
re-rendered later (``crash-harness report``) and the formats cannot drift apart. Files are
written atomically (temp file and rename) so a reader never sees half a report. The code
lives in ``harness.reports``; this module keeps the original import path.
"""

from __future__ import annotations

from harness.reports import (
    FILES,
    RENDERERS,
    SCHEMA,
    ReportError,
    build_timeline,
    load_report,
    render_html,
    render_junit,
    render_markdown,
    summarise,
    to_json,
    validate,
    write_all,
    write_atomic,
    write_reports,
)

__all__ = [
    "FILES",
    "RENDERERS",
    "SCHEMA",
    "ReportError",
    "build_timeline",
    "load_report",
    "render_html",
    "render_junit",
    "render_markdown",
    "summarise",
    "to_json",
    "validate",
    "write_all",
    "write_atomic",
    "write_reports",
]
