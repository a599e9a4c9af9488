"""What a scenario file may hold: its tables, their keys, each key's type and range.

Declared once, because two readers hold values to it: a scenario file (checked here, every
table before any value is used) and the settings given beside one (``--set``, the pytest
marker's keywords, ``harness.engine.plan._overrides``), so a value one of them refuses the
other cannot slip in.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from harness.engine.plan._providers import NAME as PROVIDER_NAME
from harness.engine.plan._scenario_toml import ScenarioFile

#: the tables and keys a scenario may have, with the type each key expects
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "scenario": {
        "name": (str,),
        "description": (str,),
        "system": (str,),
        "seed": (int,),
        "boundaries": (list,),
        "prepare": (str,),
        "prepare_sql": (list,),
        "ledger": (str, dict),
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
        # the version a ``deploy`` step starts, and its migration (``harness.faults.deploy``)
        "next": (str,),
        "prepare_next": (str,),
    },
    "cases": {
        "mode": (str,),
        "list": (list,),
        "depth": (int,),
        "crash_scope": (str,),
        "sample": (int,),
        "all_hits": (bool,),
    },
    "settle": {
        "probe": (str,),
        "recovery": (str,),
        "deadline_s": (int, float),
        "interval_s": (int, float),
        "teardown": (str,),
        "quiet_s": (int, float),
    },
    "expect": {"hold": (str, list), "violation": (str,)},
    "database": {"isolation": (str,)},
    "broker": {"kind": (str,), "persistence": (str,)},
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
    ("cases", "sample"): (0, True, 1_000_000, ""),
    ("settle", "deadline_s"): (0, False, _DAY, " s"),
    ("settle", "interval_s"): (0, False, 3600, " s"),
    ("settle", "quiet_s"): (0, True, 3600, " s"),
}


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def out_of_range(table: str, key: str, value: object) -> str | None:
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


def presets() -> tuple[str, ...]:
    """Every preset the fake providers have: any of them may serve any system (a system
    that speaks only some says so, ``System.speaks``; the reference's are its adapters)."""
    from fake_providers._presets import PRESETS

    return tuple(PRESETS)


def check_tables(source: ScenarioFile) -> None:
    """Every table of the file is known, and every key in it known, of its type, in range."""
    for table, value in source.tables.items():
        if table not in SCHEMA:
            hint = difflib.get_close_matches(table, list(SCHEMA), n=1)
            raise source.error(
                table,
                None,
                "unknown table"
                + (
                    f"; did you mean [{hint[0]}]?"
                    if hint
                    else f"; expected one of {', '.join(SCHEMA)}"
                ),
            )
        if not isinstance(value, dict):
            raise source.error(None, table, "expected a table")
        if table == "provider" and named_providers(value):
            _check_named_providers(source, value)
            continue
        _check_keys(source, table, value)


def named_providers(table: dict[str, Any]) -> bool:
    """Whether ``[provider]`` holds named providers (``[provider.mail]``): a sub-table
    other than ``options`` (which belongs to a single provider)."""
    return any(isinstance(v, dict) and k != "options" for k, v in table.items())


def _check_named_providers(source: ScenarioFile, table: dict[str, Any]) -> None:
    flat = [k for k, v in table.items() if not isinstance(v, dict) or k == "options"]
    if flat:
        raise source.error(
            "provider",
            flat[0],
            "give one [provider] table or named [provider.NAME] tables, not both (a key"
            " of a named provider goes in its own table)",
        )
    seen: dict[str, str] = {}
    for name, sub in table.items():
        where = f"provider.{name}"
        if not PROVIDER_NAME.match(name):
            raise source.error(
                where,
                None,
                f"provider name {name!r}: expected lower-case letters, digits, '_' or '-',"
                " starting with a letter (it is used in case ids: provider_5xx@NAME)",
            )
        from harness.worker_config import provider_env_name

        env = provider_env_name(name)
        if env in seen:
            raise source.error(
                where,
                None,
                f"provider names {seen[env]!r} and {name!r} are one environment name"
                f" ({env}); rename one",
            )
        seen[env] = name
        _check_keys(source, where, sub, schema_table="provider")


def _check_keys(
    source: ScenarioFile, table: str, value: dict[str, Any], *, schema_table: str | None = None
) -> None:
    """Every key of ``[table]`` is known, of its type, and in range."""
    schema = schema_table or table
    for key, item in value.items():
        allowed = SCHEMA[schema]
        if key not in allowed:
            hint = difflib.get_close_matches(key, list(allowed), n=1)
            raise source.error(
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
            raise source.error(table, key, f"expected {names}, got {item!r}")
        wrong = out_of_range(schema, key, item)
        if wrong is not None:
            raise source.error(table, key, wrong)
