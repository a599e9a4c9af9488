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
    crash-harness report REPORT.json                    (writes .html, .md, .xml beside it)
    crash-harness report REPORT.json --format md        (short for: report render ...)
    crash-harness report merge SHARD.json... --out merged.json
    """


#: what ``report REPORT.json`` writes when no --format is given: every rendering (the JSON
#: is the input; it is copied only into another directory)
DEFAULT_SET = ("html", "md", "junit")
#: file suffix per format: ``X.json`` renders to ``X.html``, ``X.md``, ``X.xml``, so
#: ``report.json`` gets the names ``certify`` gives its files
SUFFIXES = {"html": ".html", "md": ".md", "junit": ".xml", "json": ".json"}
#: ``--out -``: standard output, asked for explicitly
STDOUT = Path("-")


@report_group.command(RENDER)
@click.argument("report_path", metavar="REPORT.json", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Render only this: html (one self-contained page), md (CI step summary), junit"
    " (XML), json (the validated report itself). Default: html, md and junit, as files.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    default=None,
    help="Write this one file (atomically; the format follows its suffix unless --format is"
    " given), or '-' for standard output.",
)
@click.option(
    "--report-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write the files into this directory (default: the one REPORT.json is in).",
)
def report_command(
    report_path: Path, fmt: str | None, out_path: Path | None, report_dir: Path | None
) -> None:
    """Render REPORT.json (schema crash-harness/report/v1) in another format.

    Without --format it writes REPORT.html, REPORT.md and REPORT.xml beside REPORT.json (or
    into --report-dir) and prints their paths; HTML is never poured onto a terminal.
    `--format md` prints to standard output, and so does `--format html` when the output
    is a pipe or `--out -` is given.
    """
    from harness import reports

    try:
        if out_path is not None and report_dir is not None:
            raise BadInputError("give --out (one file) or --report-dir (every format), not both")
        if out_path is not None and out_path != STDOUT and fmt is None:
            fmt = _format_of(out_path)
        if report_dir is not None:
            from harness.cli._values import report_dir as checked_report_dir

            checked_report_dir(report_dir)  # a folder we may write in, before anything is read
        data = reports.load_report(report_path)
        if fmt is not None and (out_path == STDOUT or _to_stdout(fmt, out_path, report_dir)):
            click.echo(reports.RENDERERS[fmt](data), nl=False)
            return
        if out_path is not None:
            assert fmt is not None
            reports.write_atomic(out_path, reports.RENDERERS[fmt](data))
            click.echo(f"{fmt}: {out_path}", err=True)
            return
        where = report_dir if report_dir is not None else report_path.parent
        chosen = [fmt] if fmt is not None else list(DEFAULT_SET)
        if fmt is None and where.absolute() != report_path.parent.absolute():
            chosen.append("json")  # a directory of its own holds the whole report
        where.mkdir(parents=True, exist_ok=True)
        for name in chosen:
            path = where / (report_path.stem + SUFFIXES[name])
            reports.write_atomic(path, reports.RENDERERS[name](data))
            click.echo(f"{name}: {path}")
    except OSError as exc:  # a folder or file we may not write: the user's to fix, one line
        click.echo(f"error: cannot write {exc.filename or 'the report'}: {exc.strerror}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)


def _format_of(path: Path) -> str:
    """The format an --out file's suffix names (``report.xml`` is JUnit)."""
    for name, suffix in SUFFIXES.items():
        if path.suffix == suffix:
            return name
    raise BadInputError(
        f"--out {path}: cannot tell the format from {path.suffix or 'no suffix'!r};"
        f" give --format ({', '.join(FORMATS)})"
    )


def _to_stdout(fmt: str, out_path: Path | None, report_dir: Path | None) -> bool:
    """Whether one explicitly chosen format goes to standard output: when no file was named,
    except HTML on a terminal (1.5 MB of markup nobody can read there), which becomes a
    file."""
    if out_path is not None or report_dir is not None:
        return False
    return fmt != "html" or not _stdout_is_terminal()


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


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

    SHARD.json... are the shards' reports, in any order.

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
