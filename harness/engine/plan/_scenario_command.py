"""The ``[scenario]`` keys only a ``cmd:`` system takes: boundaries, prepare, ledger, env.

A Python system declares its boundaries, creates its tables and reads its ``WorkerConfig``
itself; a program the harness execs cannot, so its scenario says them. Each key is refused
for any other system, and the env templates and the command's placeholders are checked
against the providers this scenario runs, so a typo fails at load, not in a forked child.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.engine.plan._scenario_toml import ScenarioFile


@dataclass(frozen=True)
class CommandSettings:
    """What a ``cmd:`` system's scenario says about it (all empty for any other system)."""

    #: the boundaries it declares (None: the reference's, judged through its ledger)
    boundaries: tuple[str, ...] | None = None
    #: a ``module:function`` creating its own tables
    prepare: str | None = None
    #: or SQL statements doing it, run on the seeded case database
    prepare_sql: tuple[str, ...] | None = None
    #: a ``module:attr`` naming the ``LedgerAdapter`` that reads its own ledger, or a
    #: framework's record named inline (``{ langgraph = { notify = "destination" } }``)
    ledger: str | dict[str, dict[str, str | int]] | None = None
    #: its own environment variables, as templates
    env: dict[str, str] = field(default_factory=dict)


def read_command(
    source: ScenarioFile, meta: dict[str, Any], providers: list[str]
) -> CommandSettings:
    """``[scenario]``'s boundaries, prepare and env, each checked against the system."""
    return CommandSettings(
        boundaries=_boundaries(source, meta),
        prepare=_prepare(source, meta),
        prepare_sql=_prepare_sql(source, meta),
        ledger=_ledger(source, meta),
        env=_worker_env(source, meta, providers),
    )


def _is_cmd(meta: dict[str, Any]) -> bool:
    return str(meta["system"]).startswith("cmd:")


def _boundaries(source: ScenarioFile, meta: dict[str, Any]) -> tuple[str, ...] | None:
    if "boundaries" not in meta:
        return None
    if not _is_cmd(meta):
        raise source.error(
            "scenario",
            "boundaries",
            "only a cmd: system takes its boundaries from the scenario (a Python system "
            "declares its own)",
        )
    raw = meta["boundaries"]
    if not raw or not all(isinstance(b, str) and b.replace("_", "").isalnum() for b in raw):
        raise source.error("scenario", "boundaries", "expected a non-empty list of plain names")
    return tuple(raw)


def _prepare(source: ScenarioFile, meta: dict[str, Any]) -> str | None:
    prepare_ref: str | None = meta.get("prepare")
    if prepare_ref is not None and (not _is_cmd(meta) or prepare_ref.count(":") != 1):
        raise source.error(
            "scenario",
            "prepare",
            "expected module:function, for a cmd: system (a Python system brings its own)",
        )
    return prepare_ref


def _prepare_sql(source: ScenarioFile, meta: dict[str, Any]) -> tuple[str, ...] | None:
    raw = meta.get("prepare_sql")
    if raw is None:
        return None
    if not _is_cmd(meta):
        raise source.error(
            "scenario", "prepare_sql", "only a cmd: system's scenario prepares its tables"
        )
    if "prepare" in meta:
        raise source.error(
            "scenario", "prepare_sql", "prepare and prepare_sql both given: choose one"
        )
    if not raw or not all(isinstance(x, str) and x.strip() for x in raw):
        raise source.error(
            "scenario", "prepare_sql", "expected a non-empty list of SQL statements, as text"
        )
    return tuple(raw)


#: the frameworks whose record a scenario names inline, and what each takes
_INLINE = {
    "langgraph": "{ TOOL = ARGUMENT }: each sending tool and the argument naming its recipient",
    "dbos": "{ workflow = NAME, step = NAME, run = ARG, recipients = ARG }: the workflow, its "
    "sending step, and the workflow arguments (a position or a keyword) holding the run id "
    "and the recipients the step serves in order",
}
#: the frameworks whose table takes a number (an argument's position) as well as text
_TAKES_POSITIONS = {"dbos"}
#: the adapter each one is read by, named as a scenario's ``ledger = "module:attr"`` names
#: one (``harness.agents`` is optional code the engine never imports: it is found by name,
#: and its ``from_inline`` checks the table's keys)
INLINE_ADAPTERS = {
    "langgraph": "harness.agents.langgraph:LangGraphCheckpoints",
    "dbos": "harness.agents.dbos:DBOSSteps",
}


def _ledger(
    source: ScenarioFile, meta: dict[str, Any]
) -> str | dict[str, dict[str, str | int]] | None:
    ref = meta.get("ledger")
    if isinstance(ref, dict):
        return _inline_ledger(source, meta, ref)
    if ref is not None and (not _is_cmd(meta) or ref.count(":") != 1):
        raise source.error(
            "scenario",
            "ledger",
            "expected module:attr naming a LedgerAdapter, for a cmd: system (a Python system"
            " brings its own)",
        )
    return ref


def _inline_ledger(
    source: ScenarioFile, meta: dict[str, Any], ref: dict[str, Any]
) -> dict[str, dict[str, str | int]]:
    """``ledger = { langgraph = { notify = "destination" } }``: the framework's adapter
    (``harness.agents``) for these settings, without a module of glue. Only the table's
    shape is checked here; its keys are the adapter's, checked when the system is built."""
    expected = "; ".join(f"{k} = {v}" for k, v in _INLINE.items())
    if not _is_cmd(meta) or len(ref) != 1 or next(iter(ref)) not in _INLINE:
        raise source.error(
            "scenario", "ledger", f"expected module:attr, or for a cmd: system {expected}"
        )
    ((framework, settings),) = ref.items()
    numbers = framework in _TAKES_POSITIONS
    if (
        not isinstance(settings, dict)
        or not settings
        or not all(
            isinstance(k, str)
            and k
            and not isinstance(v, bool)
            and ((numbers and isinstance(v, int)) or (isinstance(v, str) and v))
            for k, v in settings.items()
        )
    ):
        raise source.error(
            "scenario", "ledger", f"{framework}: expected {framework} = {_INLINE[framework]}"
        )
    return {framework: dict(settings)}


def _worker_env(source: ScenarioFile, meta: dict[str, Any], providers: list[str]) -> dict[str, str]:
    """``[scenario] env`` and the placeholders of a ``cmd:`` system's command, checked: every
    placeholder one the harness fills for these providers, no secret on a command line."""
    from harness.engine.plan._worker_env import (
        CommandTemplate,
        TemplateError,
        check,
        check_env_name,
    )

    system = str(meta["system"])
    raw = meta.get("env")
    if raw is not None and not system.startswith("cmd:"):
        raise source.error(
            "scenario",
            "env",
            "only a cmd: system is exec'd with an environment of its own (a Python system"
            " reads its WorkerConfig)",
        )
    env: dict[str, str] = {}
    for name, template in (raw or {}).items():
        if not isinstance(template, str):
            raise source.error("scenario", "env", f"{name}: expected a string, got {template!r}")
        try:
            check_env_name(name, where=name)
            check(template, providers, where=name)
        except TemplateError as exc:
            raise source.error("scenario", "env", str(exc)) from None
        env[name] = template
    if system.startswith("cmd:"):
        try:
            CommandTemplate(system[len("cmd:") :], env).check(providers, where="the command")
        except TemplateError as exc:
            raise source.error("scenario", "system", str(exc)) from None
        except ValueError as exc:  # shlex: an unclosed quote
            msg = f"cannot split the command: {exc}"
            raise source.error("scenario", "system", msg) from None
    return env
