"""Scenario files (TOML): what to run, against what, and what must come out of it.

A scenario is data, loaded by path, so a user's own files and the built-in ones (shipped
inside the package) are read the same way and a ``scenarios/`` folder in the user's
repository never shadows ours. Every error names the file, the line and the key, and says
what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fake_providers import FaultRule
from harness import systems
from harness.engine.plan._providers import NAME as PROVIDER_NAME
from harness.engine.plan._providers import ProviderSpec
from harness.engine.plan.credentials import CREDENTIAL_MODES
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process._boundary import SCOPES
from harness.engine.process.lifecycle import STOP_SIGNALS, Lifecycle
from harness.engine.process.settle import Settle
from harness.engine.store import _paths
from harness.errors import BadInputError
from harness.invariants import CHECKERS
from harness.systems import System

#: the tables and keys a scenario may have, with the type each key expects
_SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "scenario": {
        "name": (str,),
        "description": (str,),
        "system": (str,),
        "seed": (int,),
        "boundaries": (list,),
        "prepare": (str,),
        "env": (dict,),
        "discover": (bool,),
    },
    "workload": {"runs": (int,), "destinations_per_topic": (int,)},
    "provider": {
        "preset": (str,),
        "faults": (list,),
        "window_s": (int, float),
        "options": (dict,),
        "credentials": (str,),
    },
    "worker": {
        "lease_s": (int, float),
        "retry_backoff_s": (list,),
        "max_attempts": (int,),
        "key_window_s": (int, float),
        "request_timeout_s": (int, float),
        "deadline_s": (int, float),
        "autojump": (bool,),
        # how a third-party worker lives and tells time (``harness.engine.process.lifecycle``)
        "daemon": (bool,),
        "stop_signal": (str,),
        "stop_grace_s": (int, float),
        "exits_after_crash": (list,),
        "fake_time": (bool,),
        "restart_gap_s": (int, float),
    },
    "cases": {"mode": (str,), "list": (list,), "depth": (int,), "crash_scope": (str,)},
    "settle": {
        "probe": (str,),
        "recovery": (str,),
        "deadline_s": (int, float),
        "interval_s": (int, float),
        "teardown": (str,),
        "quiet_s": (int, float),
    },
    "expect": {"hold": (str, list), "violation": (str,)},
}
_DAY = 86400.0
#: every number a scenario may hold, declared once: (table, key) -> (lowest, whether the
#: lowest itself is allowed, highest, unit). Always finite: a NaN, an infinity or a 1e308 that
#: got past here would reach the checkers, and they would blame the system under test for it.
_RANGES: dict[tuple[str, str], tuple[float, bool, float, str]] = {
    ("scenario", "seed"): (0, True, 2**63 - 1, ""),
    ("workload", "runs"): (1, True, 50, ""),
    ("workload", "destinations_per_topic"): (1, True, 50, ""),
    ("provider", "window_s"): (0, True, 3650 * _DAY, " s"),
    ("worker", "lease_s"): (0, False, _DAY, " s"),
    ("worker", "retry_backoff_s"): (0, True, _DAY, " s"),  # each of the list's values
    ("worker", "max_attempts"): (1, True, 1000, ""),
    ("worker", "key_window_s"): (0, True, 3650 * _DAY, " s"),
    ("worker", "request_timeout_s"): (0, False, 3600, " s"),
    ("worker", "deadline_s"): (0, False, _DAY, " s"),
    ("worker", "stop_grace_s"): (0, True, 3600, " s"),
    ("worker", "exits_after_crash"): (1, True, 255, ""),  # each of the list's exit codes
    ("worker", "restart_gap_s"): (0, True, 3650 * _DAY, " s"),
    ("cases", "depth"): (1, True, 2, ""),
    ("settle", "deadline_s"): (0, False, _DAY, " s"),
    ("settle", "interval_s"): (0, False, 3600, " s"),
    ("settle", "quiet_s"): (0, True, 3600, " s"),
}


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _out_of_range(table: str, key: str, value: object) -> str | None:
    """What is wrong with a number at ``[table] key``, or None when it is in range."""
    bounds = _RANGES.get((table, key))
    if bounds is None:
        return None
    low, low_ok, high, unit = bounds
    values = value if isinstance(value, list) else [value]
    for v in values:
        number = v if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
        finite = isinstance(number, int) or math.isfinite(number)  # a huge int is no float
        above_low = number >= low if low_ok else number > low
        if finite and above_low and number <= high:
            continue
        above = f"from {_shown(low)}" if low_ok else f"above {_shown(low)}"
        what = "numbers" if isinstance(value, list) else "a number"
        return f"expected {what} {above} to {_shown(high)}{unit}, found {v!r}"
    return None


_MODES = ("certify", "sweep", "list")


def _presets() -> tuple[str, ...]:
    """Every preset the fake providers have: any of them may serve any system (a system
    that speaks only some says so, ``System.speaks``; the reference's are its adapters)."""
    from fake_providers._presets import PRESETS

    return tuple(PRESETS)


#: presets without a dedupe key, so without a window to set
_KEYLESS = ("chat", "smtp")


@dataclass(frozen=True)
class Scenario:
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
    #: ``[settle]``: probe, recovery hook and deadline for a system with its own timers
    settle: Settle | None = None
    #: for a ``cmd:`` system: the boundaries it declares (None: the reference's, judged
    #: through the reference ledger) and a ``module:function`` creating its own tables
    boundaries: tuple[str, ...] | None = None
    prepare: str | None = None
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
        }

    def build_system(self) -> System:
        """The system under test this scenario names (a ``cmd:`` one with its boundaries),
        discovering its points if the scenario says so."""
        system = self._named_system()
        if self.discover is not None and self.discover != system.discover:
            system = dataclasses.replace(system, discover=self.discover)
        return system

    def _named_system(self) -> System:
        env = self.env or None
        if self.boundaries is None and self.prepare is None:
            if env is not None:
                return systems.command_system(self.system[len("cmd:") :], env=env)
            return systems.resolve(self.system)
        from harness.usersystem import command_user_system

        prepare = None
        if self.prepare is not None:
            prepare = _import_function(self.prepare, f"{self.path}: [scenario] prepare")
        return command_user_system(
            self.system[len("cmd:") :],
            boundaries=self.boundaries or (),
            prepare=prepare,
            env=env,
        )

    def checked_system(self) -> System:
        """``build_system``, with every listed case checked against it (boundaries, fault
        arguments) before anything runs; an error names this file and its line."""
        from harness.engine.plan._plan import validate_cases

        try:
            system = self.build_system()
        except ScenarioError:
            raise
        except BadInputError as exc:
            text = _read_quietly(self.path)
            raise _err(self.path, text, "scenario", "system", str(exc)) from None
        if system.speaks is not None:
            for name, preset in zip(
                self.provider_names(),
                [self.provider_preset, *(p.preset for p in self.more_providers)],
                strict=True,
            ):
                if preset not in system.speaks:
                    table = "provider" if self.provider_name is None else f"provider.{name}"
                    raise _err(
                        self.path,
                        _read_quietly(self.path),
                        table,
                        "preset",
                        f"system {system.name!r} speaks only {', '.join(system.speaks)}"
                        f" (the reference worker's adapters), not {preset!r}; a system of"
                        " your own (simple_system, cmd:) takes any preset",
                    )
        try:
            validate_cases(system, list(self.cases), self.provider_names())
        except BadInputError as exc:
            raise _err(self.path, _read_quietly(self.path), "cases", "list", str(exc)) from None
        return system


def _read_quietly(path: Path) -> str:
    """The file's text for finding a line number, or nothing (the message names the file)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


class ScenarioError(BadInputError):
    """A scenario file is malformed; the message names file, line and key."""


def _import_function(ref: str, where: str) -> Any:
    found = systems.import_attr(ref, where=where, error=BadInputError)
    if not callable(found):
        raise BadInputError(f"{where}: {ref!r} is not a function (expected module:function)")
    return found


def builtin_dir() -> Path:
    """Where the built-in scenarios live inside the installed package."""
    return Path(str(resources.files("harness") / "scenarios"))


def builtin_paths() -> list[Path]:
    return sorted(builtin_dir().glob("*.toml"))


def resolve_path(name: str) -> Path:
    """A path as given, or the name of a built-in scenario (with or without ``.toml``)."""
    given = Path(name)
    if _paths.exists(given, "scenario"):
        return given
    stem = given.name.removesuffix(".toml")
    candidate = builtin_dir() / f"{stem}.toml"
    if candidate.exists() and given.parent == Path("."):
        return candidate
    names = [p.stem for p in builtin_paths()]
    hint = difflib.get_close_matches(stem, names, n=3)
    raise BadInputError(
        f"scenario {name!r}: no such file, and no built-in scenario of that name"
        + (f"; did you mean {', '.join(hint)}?" if hint else f"; built-ins: {', '.join(names)}")
    )


def _line_of(text: str, table: str | None, key: str | None) -> int | None:
    lines = text.splitlines()
    start = 0
    if table is not None:
        header = re.compile(rf"^\s*\[+\s*{re.escape(table)}(\.[^\]]*)?\s*\]+")
        for i, line in enumerate(lines):
            if header.match(line):
                start = i
                break
        else:
            return None
    if key is None:
        return start + 1
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i in range(start, len(lines)):
        if pattern.match(lines[i]):
            return i + 1
    return start + 1


def _err(path: Path, text: str, table: str | None, key: str | None, message: str) -> ScenarioError:
    line = _line_of(text, table, key)
    where = f"{path}:{line}" if line else str(path)
    dotted = ".".join(x for x in (table, key) if x)
    return ScenarioError(f"{where}: [{dotted}] {message}" if dotted else f"{where}: {message}")


#: how deep a scenario's values may nest: a table, its keys, a list of cases, a list in an
#: override; far more than any field needs, far less than Python's recursion limit
MAX_DEPTH = 8


def _depth(data: object) -> int:
    """How deep tables and arrays nest in ``data``, counted without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return deepest


def _too_deep(path: Path, depth: int | None) -> str:
    found = f"{depth} levels" if depth is not None else "too deep for the TOML reader"
    return (
        f"{path}: arrays or inline tables nested {found}; a scenario nests at most"
        f" {MAX_DEPTH} (a table, a list of cases, a list in an override)"
    )


def load(path: Path) -> Scenario:
    """Read and validate one scenario file."""
    if _paths.exists(path, "scenario") and not path.is_file():  # a FIFO would block forever
        raise ScenarioError(f"{path}: cannot read scenario: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ScenarioError(
            f"{path}:{line}: expected UTF-8 text, found byte 0x{exc.object[exc.start]:02x}"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ScenarioError(_too_deep(path, None)) from None
    depth = _depth(data)
    if depth > MAX_DEPTH:  # every later walk (checks, reports, repr) would recurse as deep
        raise ScenarioError(_too_deep(path, depth))
    for table, value in data.items():
        if table not in _SCHEMA:
            hint = difflib.get_close_matches(table, list(_SCHEMA), n=1)
            raise _err(
                path,
                text,
                table,
                None,
                "unknown table"
                + (
                    f"; did you mean [{hint[0]}]?"
                    if hint
                    else f"; expected one of {', '.join(_SCHEMA)}"
                ),
            )
        if not isinstance(value, dict):
            raise _err(path, text, None, table, "expected a table")
        if table == "provider" and _named_providers(value):
            _check_named_providers(path, text, value)
            continue
        _check_keys(path, text, table, value)
    return _build(path, text, data)


def _named_providers(table: dict[str, Any]) -> bool:
    """Whether ``[provider]`` holds named providers (``[provider.mail]``): a sub-table
    other than ``options`` (which belongs to a single provider)."""
    return any(isinstance(v, dict) and k != "options" for k, v in table.items())


def _check_named_providers(path: Path, text: str, table: dict[str, Any]) -> None:
    flat = [k for k, v in table.items() if not isinstance(v, dict) or k == "options"]
    if flat:
        raise _err(
            path,
            text,
            "provider",
            flat[0],
            "give one [provider] table or named [provider.NAME] tables, not both (a key"
            " of a named provider goes in its own table)",
        )
    seen: dict[str, str] = {}
    for name, sub in table.items():
        where = f"provider.{name}"
        if not PROVIDER_NAME.match(name):
            raise _err(
                path,
                text,
                where,
                None,
                f"provider name {name!r}: expected lower-case letters, digits, '_' or '-',"
                " starting with a letter (it is used in case ids: provider_5xx@NAME)",
            )
        from harness.worker_config import provider_env_name

        env = provider_env_name(name)
        if env in seen:
            raise _err(
                path,
                text,
                where,
                None,
                f"provider names {seen[env]!r} and {name!r} are one environment name"
                f" ({env}); rename one",
            )
        seen[env] = name
        _check_keys(path, text, where, sub, schema_table="provider")


def _check_keys(
    path: Path, text: str, table: str, value: dict[str, Any], *, schema_table: str | None = None
) -> None:
    """Every key of ``[table]`` is known, of its type, and in range."""
    schema = schema_table or table
    for key, item in value.items():
        allowed = _SCHEMA[schema]
        if key not in allowed:
            hint = difflib.get_close_matches(key, list(allowed), n=1)
            raise _err(
                path,
                text,
                table,
                key,
                "unknown key"
                + (
                    f"; did you mean {hint[0]!r}?"
                    if hint
                    else f"; expected one of {', '.join(allowed)}"
                ),
            )
        # a TOML true/false is a bool, which Python also counts as an int
        is_bool = isinstance(item, bool)
        if not isinstance(item, allowed[key]) or is_bool != (bool in allowed[key]):
            names = " or ".join(t.__name__ for t in allowed[key])
            raise _err(path, text, table, key, f"expected {names}, got {item!r}")
        wrong = _out_of_range(schema, key, item)
        if wrong is not None:
            raise _err(path, text, table, key, wrong)


def _build(path: Path, text: str, data: dict[str, Any]) -> Scenario:
    meta = data.get("scenario", {})
    if "system" not in meta:
        raise _err(
            path, text, "scenario", None, "missing key 'system' (e.g. system = \"reference\")"
        )
    workload = data.get("workload", {})
    provider_table = data.get("provider", {})
    named = _named_providers(provider_table)
    tables = (
        [(f"provider.{n}", n, t) for n, t in provider_table.items()]
        if named
        else [("provider", None, provider_table)]
    )
    specs = [_provider_spec(path, text, where, name, table) for where, name, table in tables]
    given = {t["credentials"] for _, _, t in tables if "credentials" in t}
    if len(given) > 1:
        raise _err(
            path,
            text,
            tables[-1][0],
            "credentials",
            "every provider grants the same credentials; give one value (or set it once)",
        )
    credentials = given.pop() if given else "shared"
    if credentials not in CREDENTIAL_MODES:
        where = next(w for w, _, t in tables if "credentials" in t)
        raise _err(
            path,
            text,
            where,
            "credentials",
            f"expected one of {', '.join(CREDENTIAL_MODES)}, got {credentials!r}",
        )
    first = specs[0]
    preset, options, faults = first.preset, first.options, first.faults
    provider = {"window_s": first.window_s} if first.window_s is not None else {}
    worker = dict(data.get("worker", {}))
    deadline = float(worker.pop("deadline_s", 60.0))
    lifecycle = _lifecycle(path, text, meta, worker)
    if "retry_backoff_s" in worker:
        backoff = worker["retry_backoff_s"]
        if not backoff:  # each value was range-checked in ``load``
            raise _err(
                path, text, "worker", "retry_backoff_s", "expected a non-empty list of seconds"
            )
        worker["retry_backoff_s"] = tuple(float(x) for x in backoff)
    cases_table = data.get("cases", {})
    mode = cases_table.get("mode", "certify")
    if mode not in _MODES:
        raise _err(
            path, text, "cases", "mode", f"expected one of {', '.join(_MODES)}, got {mode!r}"
        )
    cases: list[CaseSpec] = []
    for item in cases_table.get("list", []):
        if not isinstance(item, str):
            raise _err(path, text, "cases", "list", f"expected case ids (strings), got {item!r}")
        try:
            cases.append(CaseSpec.parse(item))
        except BadInputError as exc:
            raise _err(path, text, "cases", "list", str(exc)) from None
    if mode == "list" and not cases:
        raise _err(path, text, "cases", "list", "mode 'list' needs at least one case id")
    depth = cases_table.get("depth", 1)
    crash_scope = cases_table.get("crash_scope", "worker")
    if crash_scope not in SCOPES:
        raise _err(
            path,
            text,
            "cases",
            "crash_scope",
            f"expected one of {', '.join(SCOPES)}, got {crash_scope!r}",
        )
    settle: Settle | None = None
    settle_table = data.get("settle")
    if settle_table is None and lifecycle.daemon:
        settle_table = {}  # a daemon settles on the provider's log or quiet alone
    if settle_table is not None:
        if "probe" not in settle_table and not lifecycle.daemon:
            raise _err(
                path, text, "settle", None, "missing key 'probe' (a command or module:function)"
            )
        try:
            settle = Settle(
                probe=settle_table.get("probe"),
                recovery=settle_table.get("recovery"),
                deadline_s=float(settle_table.get("deadline_s", 30.0)),
                interval_s=float(settle_table.get("interval_s", 0.5)),
                teardown=settle_table.get("teardown"),
                quiet_s=float(settle_table.get("quiet_s", 2.0)),
            )
        except BadInputError as exc:
            raise _err(path, text, "settle", None, str(exc)) from None
    expect = data.get("expect", {})
    hold_raw = expect.get("hold", "all")
    if isinstance(hold_raw, list):
        if not hold_raw:
            # An empty list would make any run "hold every expected invariant": a scenario
            # that expects nothing is a mistake, never a pass.
            raise _err(
                path,
                text,
                "expect",
                "hold",
                'expected at least one invariant name (or "all", the default); [] would'
                " expect nothing, so anything would pass",
            )
        for item in hold_raw:
            if not isinstance(item, str):
                raise _err(path, text, "expect", "hold", f"expected invariant names, got {item!r}")
        if len(set(hold_raw)) != len(hold_raw):
            raise _err(path, text, "expect", "hold", "lists an invariant twice")
    if "hold" in expect and "violation" in expect:
        raise _err(
            path,
            text,
            "expect",
            "hold",
            "give hold (what must pass) or violation (what must be found), not both",
        )
    hold = (
        tuple(CHECKERS)
        if hold_raw == "all"
        else tuple([hold_raw] if isinstance(hold_raw, str) else hold_raw)
    )
    for name in hold:
        if name not in CHECKERS:
            raise _err(
                path,
                text,
                "expect",
                "hold",
                f"unknown invariant {name!r}; known: {', '.join(CHECKERS)}",
            )
    violation = expect.get("violation")
    if violation is not None and violation not in CHECKERS:
        raise _err(
            path,
            text,
            "expect",
            "violation",
            f"unknown invariant {violation!r}; known: {', '.join(CHECKERS)}",
        )
    boundaries: tuple[str, ...] | None = None
    if "boundaries" in meta:
        if not str(meta["system"]).startswith("cmd:"):
            raise _err(
                path,
                text,
                "scenario",
                "boundaries",
                "only a cmd: system takes its boundaries from the scenario (a Python system "
                "declares its own)",
            )
        raw = meta["boundaries"]
        if not raw or not all(isinstance(b, str) and b.replace("_", "").isalnum() for b in raw):
            raise _err(
                path, text, "scenario", "boundaries", "expected a non-empty list of plain names"
            )
        boundaries = tuple(raw)
    prepare_ref = meta.get("prepare")
    is_cmd = str(meta["system"]).startswith("cmd:")
    if prepare_ref is not None and (not is_cmd or prepare_ref.count(":") != 1):
        raise _err(
            path,
            text,
            "scenario",
            "prepare",
            "expected module:function, for a cmd: system (a Python system brings its own)",
        )
    env = _worker_env(path, text, meta, [s.name for s in specs])
    return Scenario(
        path=path,
        name=str(meta.get("name", path.stem)),
        description=str(meta.get("description", "")),
        system=str(meta["system"]),
        seed=meta.get("seed"),
        runs=int(workload.get("runs", 3)),
        destinations_per_topic=int(workload.get("destinations_per_topic", 2)),
        provider_preset=preset,
        provider_faults=faults,
        provider_window_s=(float(provider["window_s"]) if "window_s" in provider else None),
        worker_overrides=worker,
        worker_deadline_s=deadline,
        mode=mode,
        cases=tuple(cases),
        depth=depth,
        hold=hold,
        violation=violation,
        provider_options=options,
        crash_scope=crash_scope,
        settle=settle,
        boundaries=boundaries,
        prepare=prepare_ref,
        discover=meta.get("discover"),
        credentials=credentials,
        lifecycle=lifecycle,
        provider_name=first.name if named else None,
        more_providers=tuple(specs[1:]),
        env=env,
    )


def _worker_env(
    path: Path, text: str, meta: dict[str, Any], providers: list[str]
) -> dict[str, str]:
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
        raise _err(
            path,
            text,
            "scenario",
            "env",
            "only a cmd: system is exec'd with an environment of its own (a Python system"
            " reads its WorkerConfig)",
        )
    env: dict[str, str] = {}
    for name, template in (raw or {}).items():
        if not isinstance(template, str):
            raise _err(
                path, text, "scenario", "env", f"{name}: expected a string, got {template!r}"
            )
        try:
            check_env_name(name, where=name)
            check(template, providers, where=name)
        except TemplateError as exc:
            raise _err(path, text, "scenario", "env", str(exc)) from None
        env[name] = template
    if system.startswith("cmd:"):
        try:
            CommandTemplate(system[len("cmd:") :], env).check(providers, where="the command")
        except TemplateError as exc:
            raise _err(path, text, "scenario", "system", str(exc)) from None
        except ValueError as exc:  # shlex: an unclosed quote
            msg = f"cannot split the command: {exc}"
            raise _err(path, text, "scenario", "system", msg) from None
    return env


def _provider_spec(
    path: Path, text: str, where: str, name: str | None, provider: dict[str, Any]
) -> ProviderSpec:
    """One provider table (``[provider]`` or ``[provider.NAME]``), checked."""
    preset = provider.get("preset", "payments")
    known = _presets()
    if preset not in known:
        raise _err(
            path,
            text,
            where,
            "preset",
            f"unknown preset {preset!r}; expected one of {', '.join(known)}",
        )
    if preset in _KEYLESS and "window_s" in provider:
        raise _err(path, text, where, "window_s", f"preset {preset!r} has no key, so no window")
    options = dict(provider.get("options", {}))
    if options:
        from fake_providers._presets import get_preset

        try:
            get_preset(preset).resolve(options)
        except Exception as exc:
            raise _err(path, text, where, "options", str(exc)) from None
    faults: tuple[dict[str, Any], ...] | None = None
    if "faults" in provider:
        checked = []
        for i, rule in enumerate(provider["faults"]):
            if not isinstance(rule, dict):
                raise _err(path, text, where, "faults", f"entry {i + 1}: expected a table")
            try:
                FaultRule(**rule)
            except Exception as exc:
                raise _err(path, text, where, "faults", f"entry {i + 1}: {exc}") from None
            checked.append(dict(rule))
        faults = tuple(checked)
    return ProviderSpec(
        name=name or preset,
        preset=preset,
        window_s=float(provider["window_s"]) if "window_s" in provider else None,
        options=options,
        faults=faults,
    )


def _lifecycle(path: Path, text: str, meta: dict[str, Any], worker: dict[str, Any]) -> Lifecycle:
    """``[worker]``'s lifecycle keys, taken out of the worker overrides (they are the
    harness's to act on, not settings a worker reads)."""
    found = {k: worker.pop(k) for k in _LIFECYCLE_KEYS if k in worker}
    stop_signal = found.get("stop_signal", "SIGTERM")
    if stop_signal not in STOP_SIGNALS:
        raise _err(
            path,
            text,
            "worker",
            "stop_signal",
            f"expected one of {', '.join(STOP_SIGNALS)}, got {stop_signal!r}",
        )
    codes = found.get("exits_after_crash", [])
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
        raise _err(path, text, "worker", "exits_after_crash", f"expected exit codes, got {codes!r}")
    if found.get("fake_time") and not str(meta.get("system", "")).startswith("cmd:"):
        raise _err(
            path,
            text,
            "worker",
            "fake_time",
            "libfaketime is preloaded into a program the harness execs: it needs a cmd: system",
        )
    if found.get("fake_time"):
        from harness.engine.process._faketime import library

        try:
            library()
        except BadInputError as exc:
            raise _err(path, text, "worker", "fake_time", str(exc)) from None
    return Lifecycle(
        daemon=bool(found.get("daemon", False)),
        stop_signal=stop_signal,
        stop_grace_s=float(found.get("stop_grace_s", 10.0)),
        exits_after_crash=tuple(codes),
        fake_time=bool(found.get("fake_time", False)),
        restart_gap_s=(float(found["restart_gap_s"]) if "restart_gap_s" in found else None),
    )


_LIFECYCLE_KEYS = (
    "daemon",
    "stop_signal",
    "stop_grace_s",
    "exits_after_crash",
    "fake_time",
    "restart_gap_s",
)
