"""Systems under test: the reference, the mutants, or a user's ``module:attr``.

A ``System`` bundles what the harness needs to drive a worker: its entry point, the
boundaries it declares, how to create its schema, how to read its ledger, and what it
declares of itself that a fault or a checker must know (where its roster lives, which
provider presets it speaks and the facts of those presets it relies on).

The harness finds every system the same way: by a ``module:attr`` string. Its own subjects
(the reference and the mutants, in ``harness.reference`` and ``harness.mutants``) are named
in ``SUBJECTS`` and ``MUTANTS`` and imported by those strings, as a user's system is; nothing
else in the harness imports them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from harness.errors import BadInputError, UnknownSystemError
from harness.intake import INTAKE_ROSTER, Roster, create_intake_tables
from harness.names import BOUNDARIES
from harness.presets import PresetFacts
from harness.snapshot import LedgerSnapshot, unread_ledger
from harness.worker_config import WorkerConfig

if TYPE_CHECKING:
    from harness.engine.plan._worker_env import CommandTemplate

#: the harness's own subjects, by the name ``--system`` gives them: where each is found
SUBJECTS: Mapping[str, str] = {"reference": "harness.reference.system:SYSTEM"}
#: the catalogue of mutants (name -> a function building its System), for ``mutant:NAME``
MUTANTS = "harness.mutants:CATALOGUE"


@dataclass(frozen=True)
class System:
    """Everything the harness needs to run and judge one kind of worker."""

    name: str
    description: str
    main: Callable[[WorkerConfig], None]
    prepare: Callable[[Engine], None]
    read_ledger: Callable[[Engine], LedgerSnapshot]
    boundaries: tuple[str, ...] = tuple(BOUNDARIES)
    #: invariant a mutant is expected to break (None for a system expected to hold)
    expected_violation: str | None = None
    #: WorkerConfig fields this system sets differently (e.g. its own retry policy)
    config_overrides: Mapping[str, Any] = field(default_factory=dict)
    #: for a mutant that only a particular fault exposes: the built-in scenario that does
    #: (None: the default certify campaign catches it)
    catching_scenario: str | None = None
    #: where the system reads who hears about each topic: the harness seeds it, and
    #: ``roster_change`` changes it (None: the system has no roster; that fault is refused)
    roster: Roster | None = INTAKE_ROSTER
    #: the provider presets' facts as this system relies on them (None, or a preset not
    #: listed: ``harness.presets.PRESETS``)
    presets: Mapping[str, PresetFacts] | None = None
    #: the provider presets this system's worker speaks (None: any; a worker of its own
    #: speaks whatever its scenario names); the reference's are its adapters
    speaks: tuple[str, ...] | None = None
    #: what the system intends to deliver, from its own data: called on each case's database
    #: once ``prepare`` made it and the harness wrote its work there (``run_requests``,
    #: ``roster``), before any worker starts. It may write the system's own rows (a user's
    #: ``orders``) and returns the (run_id, destination) pairs the checkers hold it to; None
    #: (or a function answering None): the workload's intent, every run to its topic's roster
    #: (``harness.engine.plan.workload.case_intent``)
    intent: Callable[[Engine], Iterable[tuple[str, str]] | None] | None = None
    #: whether its workers' sends and commits are crash points too, found without a line in
    #: the worker (``harness.engine.process._hooks``: ``before_send.WHERE``, ``after_commit.WHERE``,
    #: ...): a dry run finds them and they join ``boundaries``. On for a program that
    #: declares no boundaries; off for a system that does, unless its scenario or the
    #: command line asks (``discover = true``, ``--discover``)
    discover: bool = False
    #: (point, hit) of each discovered point's first hit from a caller other than its first
    #: (a helper the worker calls from two places makes one point; ``hit`` is where the
    #: second caller's use begins): certify crashes these too. Set from the dry run
    #: (``CaseResult.callers``), never by hand
    caller_hits: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    #: a program's own environment and arguments, as templates
    #: (``harness.engine.plan._worker_env``):
    #: checked against each campaign's database and providers before any case runs
    templates: CommandTemplate | None = None
    #: for a program: import its libraries in the harness before the campaign's first case,
    #: so each incarnation is forked warm (``harness.engine.process._warm``); returns how
    #: its incarnations start (None: a worker the harness forks anyway)
    warm_up: Callable[[], Any] | None = field(default=None, compare=False)


def _subject(name: str) -> System:
    """One of the harness's own subjects, imported by its ``module:attr`` like a user's."""
    found = import_attr(SUBJECTS[name], where="--system")
    assert isinstance(found, System), SUBJECTS[name]
    return found


def mutant_catalogue() -> Mapping[str, Callable[[], System]]:
    """The mutants by name (imported on first use: the catalogue costs a second)."""
    found = import_attr(MUTANTS, where="--system")
    assert isinstance(found, Mapping), MUTANTS
    return found


def _no_ledger(name: str, _engine: Engine) -> LedgerSnapshot:
    return unread_ledger(name)


def command_system(
    command: str,
    *,
    prepare: Callable[[Engine], None] | None = None,
    read_ledger: Callable[[Engine], LedgerSnapshot] | None = None,
    boundaries: tuple[str, ...] = tuple(BOUNDARIES),
    intent: Callable[[Engine], Iterable[tuple[str, str]] | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> System:
    """A worker that is a program: forked, then exec'd with the harness's settings in its
    environment (``CRASH_HARNESS_WORKER``, the provider secret, ``CRASH_HARNESS_CONTROL``).

    The program reads them with ``WorkerConfig.from_env()`` and arms itself just by importing
    ``harness``; its crash plan, trace and control pipes are the ones the harness made. A
    program that reads settings of its own instead (``DATABASE_URL``, ``--webhook-url``) gets
    them from templates (``harness.engine.plan._worker_env``): ``NAME=TEMPLATE`` words before the
    program,
    placeholders in its arguments, or ``env``; they are filled in the forked child, just
    before the exec, so a secret is never part of the system's name.

    Given no ``prepare``/``read_ledger``, a program is judged by what the providers saw: only
    the intake tables are made, the ledger invariants are *not judged*, and its boundaries are
    the ones a dry run reaches (``boundaries=()`` until then, see ``discover_boundaries``).
    Judging an unknown program by the reference's tables and its eleven boundaries would
    blame it for tables it never had. The one exception is the reference itself run as a
    program (``python -m harness.reference``), whose tables and boundaries the harness knows.
    """
    from harness.engine.plan._worker_env import CommandTemplate

    try:
        template = CommandTemplate(command, env)
    except ValueError as exc:  # shlex: an unclosed quote
        raise UnknownSystemError(f"--system cmd:{command}: {exc}") from None
    template.check(None, where=f"--system cmd:{template.name}")
    argv = template.argv
    if not argv:
        raise UnknownSystemError("--system cmd: needs a command, e.g. 'cmd:python -m myapp'")
    if argv[0] == "python":  # the harness's own interpreter, venv and all
        import sys

        argv[0] = sys.executable

    def main(config: WorkerConfig) -> None:  # pragma: no cover - replaced by exec
        import os

        from harness.engine.process._boundary import handoff_env

        # a Python program dumps every thread's stack on the harness's SIGABRT, as a forked
        # worker does (a hang is reported with where it hung); the program's own variables
        # are filled here, in the child, and never replace the harness's
        own = template.environment(config)
        env = {
            "PYTHONFAULTHANDLER": "1",
            **os.environ,
            **own,
            **config.to_env(),
            **handoff_env(),
        }
        if "PYTHONPATH" in own:
            from harness.engine.process import _hooks

            if _hooks.installed():  # the program's own path, after the harness's hooks
                env.update(_hooks.child_env(env))
        from harness.engine.process import _warm

        _warm.exec_or_run(template.arguments(config), env)

    def warm_up() -> object:
        from harness.engine.process import _warm

        return _warm.warm_up(argv)

    discover = False
    if prepare is None and read_ledger is None and not _is_reference_program(argv):
        prepare, read_ledger = create_intake_tables, partial(_no_ledger, f"cmd:{template.name}")
        boundaries = ()
        discover = True
    ref = _subject("reference") if prepare is None or read_ledger is None else None
    return System(
        name=f"cmd:{template.name}",
        description=f"the program {template.name!r}",
        main=main,
        prepare=prepare or _reference_part(ref).prepare,
        read_ledger=read_ledger or _reference_part(ref).read_ledger,
        boundaries=boundaries,
        presets=ref.presets if ref is not None else None,
        speaks=_subject("reference").speaks if _is_reference_program(argv) else None,
        intent=intent,
        discover=discover,
        templates=template if template.env or template.uses_placeholders() else None,
        warm_up=warm_up,
    )


def _reference_part(ref: System | None) -> System:
    assert ref is not None  # asked for only when a part was not given
    return ref


def _is_reference_program(argv: list[str]) -> bool:
    import sys

    return argv[1:] == ["-m", "harness.reference"] and argv[0] in (sys.executable, "python")


def import_attr(ref: str, *, where: str, error: type[Exception] = UnknownSystemError) -> object:
    """The object a user names as ``module:attr`` (their own modules, next to their scenarios,
    are importable from the working directory); ``error`` says what cannot be imported."""
    import os
    import sys

    module_name, _, attr = ref.partition(":")
    if not all(part.isidentifier() for part in (*module_name.split("."), attr)):
        raise error(f"{where}: {ref!r} is not module:attr (expected e.g. mypkg.crash:SYSTEM)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"{where}: cannot import {module_name!r}: {exc}") from None
    except BadInputError as exc:  # a simple_system(...) or adapter the module defines wrongly
        raise error(f"{where}: {module_name!r}: {exc}") from None
    except Exception as exc:  # the module's own code broke: the user's line, not a traceback
        from harness.engine.plan._glue import describe

        raise error(f"{where}: {describe(f'importing {module_name!r}', exc)}") from None
    return getattr(module, attr, None)


def importable_name(system: System) -> str:
    """What ``--system`` must say to get ``system`` back: its name when that resolves to it
    (``reference``, ``mutant:NAME``, ``cmd:...``, a correct ``module:attr``), else the
    ``module:attr`` it is found at among the loaded modules (a ``simple_system`` named
    ``"mailer"`` still replays), else its name as it is."""
    name = system.name
    if name in SUBJECTS or name.startswith(("mutant:", "cmd:")):
        return name
    known = _IMPORTABLE.get(id(system))
    if known is not None and known[0] is system:  # a replay line per case: scan once
        return known[1]
    found = _find_importable(system)
    _IMPORTABLE[id(system)] = (system, found)
    return found


#: id(system) -> (system, what ``importable_name`` found for it); the system is kept so its
#: id cannot be reused by another object
_IMPORTABLE: dict[int, tuple[System, str]] = {}


def _find_importable(system: System) -> str:
    name = system.name
    module_name, _, attr = name.partition(":")
    module = sys.modules.get(module_name)
    if module is not None and getattr(module, attr, None) is system:
        return name
    for module_name, module in list(sys.modules.items()):
        try:
            found = [k for k, v in vars(module).items() if v is system and not k.startswith("_")]
        except TypeError:  # a module without a __dict__
            continue
        if found and module_name != "__main__":
            return f"{module_name}:{found[0]}"
    return name


def resolve(name: str) -> System:
    """Turn ``--system`` into a System, or say clearly what exists."""
    if name in SUBJECTS:
        return _subject(name)
    if name.startswith("cmd:"):
        return command_system(name[4:])
    if name.startswith("mutant:"):
        catalogue = mutant_catalogue()
        key = name.split(":", 1)[1]
        if key not in catalogue:
            raise UnknownSystemError(
                f"--system: unknown mutant {key!r}; known mutants: {', '.join(sorted(catalogue))}"
            )
        return catalogue[key]()
    if ":" in name:
        found = import_attr(name, where="--system", error=UnknownSystemError)
        if not isinstance(found, System):
            raise UnknownSystemError(
                f"--system: {name!r} is not a harness.systems.System (got {type(found).__name__})"
            )
        return found
    raise UnknownSystemError(
        f"--system: {name!r} is not 'reference', 'mutant:NAME', 'module:attr' or 'cmd:COMMAND'"
    )
