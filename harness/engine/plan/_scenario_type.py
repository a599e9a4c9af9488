"""The scenario as loaded: the values a campaign runs, and the system under test it names.

Loading (``harness.engine.plan.scenario.load``) refuses a malformed file; this is what comes
out of it, and the one place a scenario becomes campaign settings and a ``System``. What a
listed case needs of that system (its boundaries, the presets it speaks) is known only once
the system is built, so those checks are here too, naming the file's line all the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import systems
from harness.engine.plan._providers import ProviderSpec
from harness.engine.plan._scenario_command import INLINE_ADAPTERS
from harness.engine.plan._scenario_toml import ScenarioError, error_at, read_quietly
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process.lifecycle import Lifecycle
from harness.engine.process.settle import Settle
from harness.errors import BadInputError, SystemDefinitionError
from harness.systems import System


@dataclass(frozen=True)
class Scenario:
    """One scenario file, loaded and checked (``harness.engine.plan.scenario.load``)."""

    path: Path
    name: str
    description: str
    system: str
    seed: int | None
    runs: int
    destinations_per_topic: int
    provider_preset: str
    provider_faults: tuple[dict[str, Any], ...] | None
    provider_window_s: float | None
    worker_overrides: dict[str, Any]
    worker_deadline_s: float
    mode: str
    cases: tuple[CaseSpec, ...]
    depth: int
    #: invariants that must hold ("all" = every checker)
    hold: tuple[str, ...]
    #: for a negative scenario: the invariant that must fire somewhere
    violation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the preset's per-instance options (``[provider.options]``, e.g. strip_metadata)
    provider_options: dict[str, Any] = field(default_factory=dict)
    #: what a crash kills (``[cases] crash_scope``): the whole worker, or one process
    crash_scope: str = "worker"
    #: ``[cases] sample`` and ``all_hits``: which hits of a discovered point a sweep crashes
    #: beyond the first of each class (``harness.engine.search._classes``); None: the default
    sample: int | None = None
    all_hits: bool = False
    #: ``[settle]``: probe, recovery hook and deadline for a system with its own timers
    settle: Settle | None = None
    #: for a ``cmd:`` system: the boundaries it declares (None: the reference's, judged
    #: through the reference ledger) and a ``module:function`` creating its own tables
    boundaries: tuple[str, ...] | None = None
    prepare: str | None = None
    #: or SQL statements run on the seeded case database (``_SqlPrepare``)
    prepare_sql: tuple[str, ...] | None = None
    #: for a ``cmd:`` system: a ``module:attr`` naming the ``LedgerAdapter`` that reads its
    #: own ledger (``harness.agents`` reads a LangGraph agent's checkpoints, DBOS's tables)
    ledger: str | dict[str, dict[str, str | int]] | None = None
    #: ``[scenario] discover``: crash at the worker's sends and commits too, found without a
    #: line in it (``harness.engine.process._hooks``); None: the system's own default (on for a
    #: program that declares no boundaries)
    discover: bool | None = None
    #: ``[provider] credentials``: one shared credential, or one per destination group
    credentials: str = "shared"
    #: ``[worker] daemon, stop_signal, ...``: how a third-party worker lives and tells time
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: the first provider's name (``[provider.NAME]``); None: a single ``[provider]``, named
    #: after its preset
    provider_name: str | None = None
    #: the other named providers, in the file's order (``harness.engine.plan._providers``)
    more_providers: tuple[ProviderSpec, ...] = ()
    #: for a ``cmd:`` system: its own environment variables, as templates
    #: (``harness.engine.plan._worker_env``: ``{db.url}``, ``{provider.NAME.url}``, ...)
    env: dict[str, str] = field(default_factory=dict)
    #: ``[database] isolation``: a PostgreSQL case's own schema (``schema``) or database
    db_isolation: str = "schema"
    #: ``[worker] next``: the system a ``deploy`` step starts (the next version); None: the
    #: same one again. ``[worker] prepare_next``: a ``module:function`` run between the two
    next_system: str | None = None
    prepare_next: str | None = None
    #: ``[broker] persistence``: a Redis broker the harness starts for the campaign (``none``
    #: or ``aof``: what survives a ``broker_restart``); None: no ``[broker]`` table
    broker: str | None = None

    def provider_names(self) -> list[str]:
        return [self.provider_name or self.provider_preset, *(p.name for p in self.more_providers)]

    def campaign_fields(self) -> dict[str, Any]:
        """The ``CampaignSettings`` fields this scenario fixes (one mapping for the CLI and
        the pytest plugin, so neither forgets a key)."""
        return {
            "worker_deadline_s": self.worker_deadline_s,
            "runs": self.runs,
            "destinations_per_topic": self.destinations_per_topic,
            "provider_faults": self.provider_faults,
            "provider_window_s": self.provider_window_s,
            "worker_overrides": dict(self.worker_overrides),
            "provider_preset": self.provider_preset,
            "provider_options": dict(self.provider_options),
            "crash_scope": self.crash_scope,
            "settle": self.settle,
            "credentials": self.credentials,
            "lifecycle": self.lifecycle,
            "provider_name": self.provider_name,
            "more_providers": self.more_providers,
            "db_isolation": self.db_isolation,
            "broker": self.broker,
            "next_system": self.build_next(),
            "prepare_next": self._prepare_next(),
        }

    def build_next(self) -> System | None:
        """The next version a ``deploy`` step starts, built as ``system`` is (a ``cmd:``
        one with this scenario's env templates); None when the scenario names none."""
        if self.next_system is None:
            return None
        try:
            return dataclasses.replace(
                self, system=self.next_system, next_system=None
            )._named_system()
        except BadInputError as exc:
            raise error_at(self.path, read_quietly(self.path), "worker", "next", str(exc)) from None

    def _prepare_next(self) -> Any:
        if self.prepare_next is None:
            return None
        try:
            return _import_function(self.prepare_next, "[worker] prepare_next")
        except BadInputError as exc:
            text = read_quietly(self.path)
            raise error_at(self.path, text, "worker", "prepare_next", str(exc)) from None

    def build_system(self) -> System:
        """The system under test this scenario names (a ``cmd:`` one with its boundaries),
        discovering its points if the scenario says so."""
        system = self._named_system()
        if self.discover is not None and self.discover != system.discover:
            system = dataclasses.replace(system, discover=self.discover)
        return system

    def _named_system(self) -> System:
        env = self.env or None
        if (
            self.boundaries is None
            and self.prepare is None
            and self.prepare_sql is None
            and self.ledger is None
        ):
            if env is not None:
                return systems.command_system(self.system[len("cmd:") :], env=env)
            return systems.resolve(self.system)
        from harness.usersystem import command_user_system

        prepare: Any = None if self.prepare_sql is None else _SqlPrepare(self.prepare_sql)
        if self.prepare is not None:
            try:
                prepare = _import_function(self.prepare, "[scenario] prepare")
            except BadInputError as exc:  # the prepare line, not the system line above it
                text = read_quietly(self.path)
                raise error_at(self.path, text, "scenario", "prepare", str(exc)) from None
        ledger: Any = None  # checked to be a LedgerAdapter by command_user_system
        if isinstance(self.ledger, dict):  # a framework's record, its adapter found by name
            ((framework, settings),) = self.ledger.items()
            base: Any = systems.import_attr(
                INLINE_ADAPTERS[framework], where="[scenario] ledger", error=BadInputError
            )
            try:
                ledger = base.from_inline(settings)
            except ValueError as exc:
                text = read_quietly(self.path)
                raise error_at(self.path, text, "scenario", "ledger", str(exc)) from None
        elif self.ledger is not None:
            try:
                ledger = systems.import_attr(
                    self.ledger, where="[scenario] ledger", error=BadInputError
                )
            except BadInputError as exc:
                text = read_quietly(self.path)
                raise error_at(self.path, text, "scenario", "ledger", str(exc)) from None
        try:
            return command_user_system(
                self.system[len("cmd:") :],
                boundaries=self.boundaries or (),
                prepare=prepare,
                ledger=ledger,
                env=env,
            )
        except SystemDefinitionError as exc:
            if ledger is None:
                raise
            text = read_quietly(self.path)
            raise error_at(self.path, text, "scenario", "ledger", str(exc)) from None

    def checked_system(self) -> System:
        """``build_system``, with every listed case checked against it (boundaries, fault
        arguments) before anything runs; an error names this file and its line."""
        from harness.engine.plan._plan import validate_cases

        try:
            system = self.build_system()
        except ScenarioError:
            raise
        except BadInputError as exc:
            text = read_quietly(self.path)
            raise error_at(self.path, text, "scenario", "system", str(exc)) from None
        self._check_presets_spoken(system)
        self._check_broker()
        try:
            validate_cases(system, list(self.cases), self.provider_names())
        except BadInputError as exc:
            raise error_at(self.path, read_quietly(self.path), "cases", "list", str(exc)) from None
        return system

    def _check_broker(self) -> None:
        """A ``broker_restart`` step, or ``{broker.url}`` in ``env``, needs the ``[broker]``
        table that has the harness start one: said at the line that asks for it."""
        if self.broker is not None:
            return
        text = read_quietly(self.path)
        why = (
            'needs a [broker] table (persistence = "none" or "aof"): the Redis the harness'
            " starts for the run; a broker the worker was given is never restarted"
        )
        if any(step.fault == "broker_restart" for case in self.cases for step in case.steps):
            raise error_at(self.path, text, "cases", "list", f"broker_restart {why}")
        if any("{broker.url}" in value for value in self.env.values()):
            raise error_at(self.path, text, "scenario", "env", f"{{broker.url}} {why}")

    def _check_presets_spoken(self, system: System) -> None:
        """Every provider's preset is one ``system`` speaks (when it speaks only some)."""
        if system.speaks is None:
            return
        for name, preset in zip(
            self.provider_names(),
            [self.provider_preset, *(p.preset for p in self.more_providers)],
            strict=True,
        ):
            if preset not in system.speaks:
                table = "provider" if self.provider_name is None else f"provider.{name}"
                raise error_at(
                    self.path,
                    read_quietly(self.path),
                    table,
                    "preset",
                    f"system {system.name!r} speaks only {', '.join(system.speaks)}"
                    f" (the reference worker's adapters), not {preset!r}; a system of"
                    " your own (simple_system, cmd:) takes any preset",
                )


def _import_function(ref: str, where: str) -> Any:
    found = systems.import_attr(ref, where=where, error=BadInputError)
    if not callable(found):
        raise BadInputError(f"{where}: {ref!r} is not a function (expected module:function)")
    return found


class _SqlPrepare:
    """``[scenario] prepare_sql``: the statements run in order, in one transaction, on the
    case's database once the harness has seeded its work (``run_requests``, ``roster``), so
    an agent's own tables can be filled from it in a line of SQL instead of a Python module.
    It declares no intent of its own: the intent is the work the harness seeded."""

    __qualname__ = "prepare_sql"

    def __init__(self, statements: tuple[str, ...]) -> None:
        self.statements = statements

    def __call__(self, engine: Any) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        with engine.begin() as conn:
            for n, statement in enumerate(self.statements, 1):
                try:
                    conn.exec_driver_sql(statement)
                except SQLAlchemyError as exc:
                    first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
                    raise BadInputError(
                        f"[scenario] prepare_sql statement {n} failed on the case's "
                        f"database: {first}"
                    ) from None
