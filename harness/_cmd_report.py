"""``crash-harness report``: re-render a saved report.json as HTML, Markdown or JUnit XML.

Every format is a function of the JSON alone, so a report from CI can be turned into a
picture later, on another machine, without the work dir that produced it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.errors import BadInputError, ExitStatus

FORMATS = ("html", "md", "junit", "json")


@click.command("report")
@click.argument("report_path", metavar="REPORT.json", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="html",
    show_default=True,
    help="What to render: html (one self-contained page), md (CI step summary), junit (XML),"
    " json (the validated report itself).",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write here (atomically) instead of to standard output.",
)
def report_command(report_path: Path, fmt: str, out_path: Path | None) -> None:
    """Render REPORT.json (schema crash-harness/report/v1) in another format."""
    from harness import reports

    try:
        data = reports.load_report(report_path)
        text = reports.RENDERERS[fmt](data)
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    if out_path is None:
        click.echo(text, nl=False)
        return
    reports.write_atomic(out_path, text)
    click.echo(f"{fmt}: {out_path}", err=True)


COMMANDS = [report_command]
