"""Every command a user can reach says what each of its options and arguments is for, and
answers ``--version``: the command tree is walked with the lazy commands loaded, so a new
option without help text fails here, by name."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from harness import __version__
from harness.cli import main


def _walk(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{' '.join(path)} {name}"
            yield from _walk(sub, (*path, name))


def _tree() -> list[tuple[str, click.Command]]:
    return list(_walk(main, ("crash-harness",)))


def test_the_walk_reaches_the_lazy_commands_and_their_subcommands() -> None:
    """The walk is not vacuous: lazy commands and nested subcommands are in it."""
    names = {name for name, _ in _tree()}
    assert {
        "crash-harness certify",
        "crash-harness report render",
        "crash-harness report merge",
        "crash-harness scenarios check",
        "crash-harness explore",
        "crash-harness completion",
    } <= names


def test_every_option_has_help_text() -> None:
    """An option without help shows up in --help as a bare flag nobody can guess at (a hidden
    one is internal and not listed)."""
    bare = [
        f"{name} {'/'.join(param.opts)}"
        for name, command in _tree()
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert bare == [], "options without help text: " + ", ".join(bare)


def test_every_argument_is_named_in_its_commands_help() -> None:
    """click arguments carry no help of their own: the command's help must name each one."""
    unnamed = []
    for name, command in _tree():
        text = (command.help or "") + " " + (command.short_help or "")
        for param in command.params:
            if isinstance(param, click.Argument):
                shown = param.make_metavar(click.Context(command)).rstrip(".").strip("[]")
                shown = shown.removesuffix("...")
                if shown not in text and (param.name or "").upper() not in text:
                    unnamed.append(f"{name} {shown}")
    assert unnamed == [], "arguments their command's help never names: " + ", ".join(unnamed)


@pytest.mark.parametrize(
    "args",
    [
        ["certify", "--version"],
        ["report", "--version"],
        ["report", "merge", "--version"],
        ["scenarios", "list", "--version"],
        ["run", "--version"],
        ["ledger", "--version"],
    ],
)
def test_version_works_on_subcommands(args: list[str]) -> None:
    """``--version`` answers on a subcommand as at the top level, before any other checks."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.output == f"crash-harness, version {__version__}\n"


def test_every_command_in_the_tree_takes_version() -> None:
    """No command is left out (the top level's own option comes from click itself)."""
    missing = [
        name
        for name, command in _tree()
        if not any("--version" in getattr(p, "opts", ()) for p in command.params)
    ]
    assert missing == [], "commands without --version: " + ", ".join(missing)


def test_a_subcommand_version_imports_no_engine() -> None:
    """`certify --version` stays as cheap as `--version`: no database or provider import."""
    probe = (
        "import sys\n"
        "from harness.cli import main\n"
        "try:\n"
        "    main(['certify', '--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('sqlalchemy', 'requests', 'werkzeug', 'fake_providers',"
        " 'harness.engine.case.campaign')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
