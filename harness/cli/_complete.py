"""Shell completion: the names a user would otherwise look up (scenarios, mutants, case ids,
``--system`` values), and ``crash-harness completion bash|zsh|fish``.

Click runs a completion callback in a fresh ``crash-harness`` process on every Tab press, so
nothing here may import the engine: importing ``harness.faults`` or ``harness.mutants``
pulls in SQLAlchemy and the fake providers (over a second). The names come from the package
files and from :mod:`harness.names`; ``tests/test_completion.py`` keeps the fault table
below equal to ``harness.faults.FAULTS``. ``harness.cli`` imports this module, so it must
stay as cheap as ``--version``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.names import BOUNDARIES

if TYPE_CHECKING:  # imported by each callback: --version and --help never need them
    from click.shell_completion import CompletionItem

#: the environment variable click's completion scripts set (``_<PROG>_COMPLETE``)
COMPLETE_ENV = "_CRASH_HARNESS_COMPLETE"
PROG = "crash-harness"
SHELLS = ("bash", "zsh", "fish")

#: every fault id (SPEC names) -> whether its step names a boundary (``FAULT@BOUNDARY#HIT``)
FAULT_KINDS: dict[str, bool] = {
    "crash": True,
    "pause_past_lease": True,
    "concurrent_claim": False,
    "clock_jump": True,
    "roster_change": True,
    "restore_backup": True,
    "db_restart": True,
    "broker_restart": True,
    "deploy": True,
    "provider_accept_then_drop": False,
    "provider_timeout": False,
    "provider_5xx": False,
    "provider_429": False,
    "provider_slow": False,
    "provider_hold": False,
    "task_never_started": False,
    "loop_stall": False,
}


def _package_dir(name: str) -> Path:
    from importlib import resources

    return Path(str(resources.files("harness") / name))


def scenario_names() -> list[str]:
    """The built-in scenarios, as ``run NAME`` takes them
    (``harness.engine.plan.scenario.builtin_dir``)."""
    return sorted(p.stem for p in _package_dir("scenarios").glob("*.toml"))


def mutant_names() -> list[str]:
    """The mutants, one module each in ``harness/mutants`` (read from the files, not imported:
    the catalogue's import costs a second)."""
    files = _package_dir("mutants").glob("*.py")
    return sorted(p.stem for p in files if not p.stem.startswith("_"))


def case_ids() -> list[str]:
    """Every one-step case id with a first hit: ``baseline``, ``FAULT@BOUNDARY#1`` for each
    fault that names a boundary, and the bare id of each fault that does not."""
    ids = ["baseline"]
    for fault, at_boundary in FAULT_KINDS.items():
        if at_boundary:
            ids.extend(f"{fault}@{boundary}#1" for boundary in BOUNDARIES)
        else:
            ids.append(fault)
    return ids


def complete_scenario(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A built-in scenario's name; a path to one's own file when that is what is typed."""
    from click.shell_completion import CompletionItem

    names = [CompletionItem(n) for n in scenario_names() if n.startswith(incomplete)]
    if not names or "/" in incomplete or incomplete.startswith((".", "~")):
        names.append(CompletionItem(incomplete, type="file"))
    return names


def complete_mutant(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A mutant's name (``mutants --only NAME``)."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(n) for n in mutant_names() if n.startswith(incomplete)]


def complete_system(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """``reference`` or ``mutant:NAME`` (an importable ``module:attr`` or ``cmd:COMMAND`` is
    the user's own, nothing to list)."""
    from click.shell_completion import CompletionItem

    values = ["reference", *(f"mutant:{n}" for n in mutant_names())]
    return [CompletionItem(v) for v in values if v.startswith(incomplete)]


def complete_case(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A case id; after a ``+``, the next step of a schedule (``crash@X#1+crash@Y#1``)."""
    from click.shell_completion import CompletionItem

    head, plus, tail = incomplete.rpartition("+")
    prefix = head + plus
    return [
        CompletionItem(prefix + step)
        for step in case_ids()
        if step.startswith(tail) and not (plus and step == "baseline")
    ]


def _script(shell: str) -> str:
    from click.shell_completion import get_completion_class

    # the group this command was given to (``crash-harness``), not an import of it
    main = click.get_current_context().find_root().command
    cls = get_completion_class(shell)
    assert cls is not None, shell
    return cls(main, {}, PROG, COMPLETE_ENV).source()


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_cmd(shell: str) -> None:
    """Print the completion script for SHELL: bash, zsh or fish.

    \b
    bash:  eval "$(crash-harness completion bash)"        (in ~/.bashrc)
    zsh:   eval "$(crash-harness completion zsh)"         (in ~/.zshrc)
    fish:  crash-harness completion fish > ~/.config/fish/completions/crash-harness.fish

    Completes commands, options, built-in scenario names, mutant names, --system values and
    case ids. bash splits words at ':', so `--system mutant:NAME` completes there only
    with ':' taken out of COMP_WORDBREAKS (`COMP_WORDBREAKS=${COMP_WORDBREAKS//:}`).
    """
    click.echo(_script(shell), nl=False)
