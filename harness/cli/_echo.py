"""The lines every command prints alike: a verdict's mark, the ``[N/M]`` column, coverage
gaps, a kept work dir, a byte count.

Shared by the command modules and the ``crash-harness`` group itself, so none of them
imports another for a helper.
"""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli import _style
from harness.names import near_side_kind

__all__ = [
    "MARKS",
    "counted",
    "echo_discovered",
    "echo_gaps",
    "echo_kept",
    "format_bytes",
    "mark_of",
]

#: the mark a case's verdict gets on its progress line
MARKS = {"pass": "ok  ", "fail": "FAIL", "unknown": "??? ", "gap": "GAP ", "flaky": "FLKY"}


def mark_of(verdict: str) -> str:
    """A verdict's mark, coloured when colour is on (the padding stays outside the colour,
    so a coloured line and a plain one line up alike)."""
    mark = MARKS[verdict]
    word = mark.rstrip()
    return _style.verdict(word, verdict) + mark[len(word) :]


def counted(counter: str) -> str:
    """The ``[N/M]`` column after a case's duration (nothing when the total is unknown)."""
    return f"  {counter}" if counter else ""


def echo_gaps(gaps: list[str], *, shown: int = 20) -> None:
    """Name every planned step that did not land (a coverage gap is never a pass)."""
    if not gaps:
        return
    click.echo(f"coverage gap: {len(gaps)} planned step(s) did not land:")
    for line in gaps[:shown]:
        click.echo(f"  - {line}")
    if len(gaps) > shown:
        click.echo(f"  ... and {len(gaps) - shown} more (see the report)")


def echo_discovered(
    boundaries: tuple[str, ...],
    reached: dict[str, int],
    targets: dict[str, list[str]],
    unnamed: dict[str, int] | None = None,
    callers: dict[str, dict[str, int]] | None = None,
) -> None:
    """A dry run's near-side points (``harness.engine.process._hooks``), one a line: name, hits
    in the dry run, what it talked to, and for a helper used from several of the worker's
    lines, the first hit from each (certify crashes each); then every send or commit it saw
    and could not name (never crashed: said, never silent). Named boundaries are listed by
    the caller's line."""
    found = [b for b in boundaries if near_side_kind(b)]
    if found:
        width = max(len(b) for b in found)
        click.echo(f"discovered {len(found)} near-side point(s) (name, dry-run hits, target):")
        for name in found:
            # a target's path may hold a secret the harness handed out (a Slack
            # webhook's URL): masked, as in every report
            said = [_scrub(t) for t in targets.get(name) or ["?"]]
            more = f" (+{len(said) - 1} more)" if len(said) > 1 else ""
            via = (callers or {}).get(name, {})
            from_lines = (
                f"  [{len(via)} callers: " + ", ".join(f"#{h} {c}" for c, h in via.items()) + "]"
                if len(via) > 1
                else ""
            )
            click.echo(f"  {name:<{width}}  x{reached.get(name, 0):<3} {said[0]}{more}{from_lines}")
    if unnamed:
        click.echo(
            f"seen and not named: {sum(unnamed.values())} send(s)/commit(s) made where no line"
            " of the worker is on the stack and no namer knows the library (no crash point,"
            " never crashed):"
        )
        for who, count in unnamed.items():
            click.echo(f"  x{count:<3} {who}")


def echo_kept(workdir: Path, *, err: bool = False) -> None:
    """Keep a run's work dir, say where it is, and remove the kept dirs of this project's
    finished runs beyond the newest few, and other projects' past a week (saying how many):
    failing runs must not fill the scratch tmpfs, nor take someone else's evidence."""
    from harness.engine.store import _room, _scratch

    try:
        removed = _scratch.keep_and_prune(workdir)
    except OSError as exc:  # its disk full: the dir is there all the same
        said = _room.cannot_write(exc, workdir / _scratch.KEPT_FILE)
        if said is None:
            raise
        click.echo(f"work dir kept: {workdir} (not marked kept: {said})", err=err)
        return
    click.echo(f"work dir kept: {workdir}", err=err)
    if removed:
        freed = sum(r.bytes for r in removed)
        click.echo(
            f"removed {len(removed)} older kept work dir(s) ({format_bytes(freed)}): this"
            f" project's newest {_scratch.kept_limit()} stay ({_scratch.KEEP_ENV}), other"
            f" projects' for {_scratch.KEPT_MAX_AGE_DAYS} days;"
            " `crash-harness clean --kept` removes them all",
            err=err,
        )


def format_bytes(count: int) -> str:
    """A byte count as a person reads it (``clean`` and the kept-dir line say what they freed)."""
    if count < 1024:
        return f"{count} bytes"
    size = count / 1024
    for unit in ("KB", "MB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _scrub(text: str) -> str:
    """A target as it may be printed (a webhook URL's secret masked); imported here, not at
    the top: ``--version`` and ``--help`` load no provider code."""
    from harness.engine.store import _secrets

    return _secrets.scrub(text)
