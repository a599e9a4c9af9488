"""``crash-harness report``: re-render a saved report.json as HTML, Markdown or JUnit XML,
or merge the reports of a campaign's shards into one.

Every format is a function of the JSON alone, so a report from CI can be turned into a
picture later, on another machine, without the work dir that produced it.

``report REPORT.json ...`` is short for ``report render REPORT.json ...`` (the command
``report`` was before it gained ``merge``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.errors import BadInputError, ExitStatus

FORMATS = ("html", "md", "junit", "json")
#: the subcommand ``report REPORT.json`` stands for
RENDER = "render"


class _ReportGroup(click.Group):
    """A group whose first word, when it names no subcommand, is a report to render."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [RENDER, *args]
        return super().parse_args(ctx, args)


@click.group("report", cls=_ReportGroup)
def report_group() -> None:
    """Render a saved report in another format, or merge shard reports.

    \b
    crash-harness report REPORT.json --format md        (short for: report render ...)
    crash-harness report merge SHARD.json... --out merged.json
    """


@report_group.command(RENDER)
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


@report_group.command("merge")
@click.argument(
    "shard_paths",
    metavar="SHARD.json...",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
)
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where the merged report.json goes (written atomically).",
)
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Merge even if shards are missing: the report names them and cannot pass.",
)
def merge_command(*, shard_paths: tuple[Path, ...], out_path: Path, allow_partial: bool) -> None:
    """Merge the report.json of every shard (--shard i/n) of one campaign into one report.

    Cases come back in the unsharded plan's order; summary, coverage and verdict are
    recomputed over all of them. Exits as the command that wrote the shards would have on
    the whole campaign (3 at best when --allow-partial merged an incomplete set).
    """
    from harness import reports
    from harness.reports.merge import merge_reports, verdict

    try:
        loaded = [reports.load_report(path) for path in shard_paths]
        merged = merge_reports(
            loaded, [str(path) for path in shard_paths], allow_partial=allow_partial
        )
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    reports.write_atomic(out_path, reports.dumps(merged))
    status, message = verdict(merged)
    s = merged["summary"]
    info = merged["merged"]
    click.echo(
        f"merged {len(info['shards'])} of {info['count']} shard(s): {s['cases']} case(s),"
        f" {s['passed']} passed, {s['failed']} failed, {s['unknown']} unknown;"
        f" boundaries covered {s['boundaries_covered']}/{s['boundaries_documented']}"
    )
    if info["missing"]:
        click.echo("missing shard(s): " + ", ".join(info["missing"]))
    if s["invariants_violated"]:
        click.echo("invariants violated: " + ", ".join(s["invariants_violated"]))
    click.echo(message)
    click.echo(f"report: {out_path}")
    sys.exit(status)


COMMANDS = [report_group]
