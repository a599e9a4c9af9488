"""``crash-harness clean``: remove what runs killed before they could clean up left behind.

Every run already does this when it starts; ``clean`` does it on demand, and with ``--kept``
also removes the work dirs failing runs kept on purpose (their makers gone).
"""

from __future__ import annotations

import sys

import click

from harness.errors import ExitStatus


@click.command("clean")
@click.option(
    "--db",
    "db_url",
    default=None,
    help="Also drop the case schemas killed runs left in this PostgreSQL database, and the"
    " case databases they left on its server.",
)
@click.option(
    "--kept",
    is_flag=True,
    help="Also remove work dirs kept on purpose by finished runs (failures, --keep-workdir);"
    " a live run's are never touched.",
)
def clean_cmd(*, db_url: str | None, kept: bool) -> None:
    """Remove work dirs, cgroups, case schemas and databases and processes of runs that are
    gone."""
    from harness.cli._echo import format_bytes
    from harness.engine.process import _keeper, _tree
    from harness.engine.process.supervisor import CGROUP_PREFIX
    from harness.engine.store import _db, _pgdb, _scratch
    from harness.errors import BadInputError

    try:
        _scratch.scratch_root()  # a CRASH_HARNESS_TMPDIR that is no folder: not "nothing left"
    except BadInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    # processes first: what a killed run's keepers (walk mode) still hold may write to its dirs
    swept = _keeper.sweep_stale()
    for keeper in swept:
        click.echo(
            f"killed keeper {keeper.keeper} of a run that is gone, and the"
            f" {keeper.killed} process(es) still under it"
        )
    removed = _scratch.sweep_stale(kept_too=kept)
    for path, size in removed:
        click.echo(f"removed work dir {path} ({format_bytes(size)})")
    if removed:
        freed = sum(r.bytes for r in removed)
        click.echo(f"removed {len(removed)} work dir(s), {format_bytes(freed)} freed")
    base = _tree.cgroup2_base()
    groups = _tree.sweep_stale(base, CGROUP_PREFIX) if base is not None else []
    for group in groups:
        click.echo(f"removed cgroup {group}")
    schemas: list[str] = []
    databases: list[str] = []
    if db_url is not None:
        try:
            url = _db.normalise_url(db_url)
            if not url.startswith("postgresql"):
                raise BadInputError("--db: only a PostgreSQL database holds case schemas")
            _db.check_reachable(url)
            schemas = _db.sweep_stale_schemas(url)
            databases = _pgdb.sweep_stale(url)
        except BadInputError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(ExitStatus.BAD_INPUT)
        for name in schemas:
            click.echo(f"dropped schema {name}")
        for name in databases:
            click.echo(f"dropped database {name}")
    if not (swept or removed or groups or schemas or databases):
        click.echo("nothing left behind")
    if not kept:
        left = _scratch.kept_dirs()
        if left:
            click.echo(
                f"{len(left)} kept work dir(s) of finished runs stay in {left[0].parent};"
                " --kept removes them too"
            )
    sys.exit(ExitStatus.PASSED)
