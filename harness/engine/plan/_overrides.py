"""Campaign settings given beside a scenario or system (the pytest marker's keywords, the
CLI's ``--set NAME=JSON``), checked by the same table a scenario file is, and restated in
every replay command.

A replay line that dropped ``runs=1`` would rerun a different workload and could pass where
the case failed; so whatever a caller set on top of the scenario travels with the case as
``--set`` words, and the command that reads them checks them as a scenario file would.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from harness.engine.plan._scenario_schema import SCHEMA, out_of_range, presets
from harness.engine.plan.credentials import CREDENTIAL_MODES
from harness.errors import BadInputError

#: CampaignSettings field -> the scenario file's (table, key) that means the same
_AS_SCENARIO_KEY: dict[str, tuple[str, str]] = {
    "runs": ("workload", "runs"),
    "destinations_per_topic": ("workload", "destinations_per_topic"),
    "worker_deadline_s": ("worker", "deadline_s"),
    "provider_window_s": ("provider", "window_s"),
}
#: fields a ``--set`` may name, with what each expects (for the error message)
SETTABLE: dict[str, str] = {
    "runs": "an integer",
    "destinations_per_topic": "an integer",
    "worker_deadline_s": "seconds",
    "provider_window_s": "seconds, or null for the preset's own",
    "worker_overrides": 'an object of [worker] keys, e.g. {"lease_s": 0.5}',
    "provider_preset": "a preset name",
    "provider_options": "an object of the preset's options",
    "provider_faults": "a list of fault rules",
    "crash_scope": "worker or process",
    "credentials": " or ".join(CREDENTIAL_MODES),
    "db_isolation": "schema or database",
}


class OverrideError(BadInputError):
    """A setting given beside a scenario that a scenario file would refuse."""


def _number(field: str, table: str, key: str, value: Any, where: str) -> None:
    allowed = SCHEMA[table][key]
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise OverrideError(
            f"{where}{field}: expected {SETTABLE.get(field, 'a number')}, found {value!r}"
        )
    wrong = out_of_range(table, key, value)
    if wrong:
        raise OverrideError(f"{where}{field}: {wrong}")


def check(field: str, value: Any, *, where: str = "--set ") -> Any:
    """``value`` if a scenario file would accept it for ``field``; else an ``OverrideError``
    naming ``where``, the field, what was expected and what was found."""
    if field not in SETTABLE:
        raise OverrideError(
            f"{where}unknown setting {field!r}; expected one of {', '.join(SETTABLE)}"
        )
    if field == "provider_window_s" and value is None:
        return None
    if field in _AS_SCENARIO_KEY:
        _number(field, *_AS_SCENARIO_KEY[field], value, where)
    elif field == "worker_overrides":
        if not isinstance(value, Mapping):
            raise OverrideError(f"{where}{field}: expected {SETTABLE[field]}, found {value!r}")
        for key, item in value.items():
            if key not in SCHEMA["worker"] or key == "deadline_s":
                known = ", ".join(k for k in SCHEMA["worker"] if k != "deadline_s")
                raise OverrideError(f"{where}{field}: unknown key {key!r}; expected {known}")
            if SCHEMA["worker"][key] == (bool,):
                if not isinstance(item, bool):
                    raise OverrideError(
                        f"{where}{field}.{key}: expected true or false, found {item!r}"
                    )
                continue
            shown = list(item) if isinstance(item, tuple) else item
            _number(f"{field}.{key}", "worker", key, shown, where)
    elif field == "provider_preset":
        if value not in presets():
            raise OverrideError(
                f"{where}{field}: expected one of {', '.join(presets())}, found {value!r}"
            )
    elif field == "crash_scope":
        if value not in ("worker", "process"):
            raise OverrideError(f"{where}{field}: expected worker or process, found {value!r}")
    elif field == "db_isolation":
        if value not in ("schema", "database"):
            raise OverrideError(f"{where}{field}: expected {SETTABLE[field]}, found {value!r}")
    elif field == "credentials":
        if value not in CREDENTIAL_MODES:
            raise OverrideError(f"{where}{field}: expected {SETTABLE[field]}, found {value!r}")
    elif field == "provider_options" and not isinstance(value, Mapping):
        raise OverrideError(f"{where}{field}: expected {SETTABLE[field]}, found {value!r}")
    elif field == "provider_faults":
        from fake_providers import FaultRule
        from fake_providers._errors import ProviderError

        if not isinstance(value, list | tuple):
            raise OverrideError(f"{where}{field}: expected {SETTABLE[field]}, found {value!r}")
        try:
            for rule in value:
                FaultRule.from_json(rule)
        except (ProviderError, TypeError, AttributeError) as exc:
            raise OverrideError(f"{where}{field}: {exc}") from None
        return tuple(dict(rule) for rule in value)
    return dict(value) if isinstance(value, Mapping) else value


def parse(text: str) -> tuple[str, Any]:
    """One ``--set NAME=JSON`` word: the field and its checked value."""
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise OverrideError(f"--set {text!r}: expected NAME=JSON, e.g. runs=1")
    try:
        value = json.loads(raw, parse_constant=lambda c: math.nan)
    except json.JSONDecodeError:
        raise OverrideError(f"--set {name}: expected a JSON value, found {raw!r}") from None
    return name, check(name, value, where="--set ")


def as_args(overrides: Mapping[str, Any]) -> list[str]:
    """The ``--set`` words that restate ``overrides`` (sorted, so one case has one line)."""
    words: list[str] = []
    for name in sorted(overrides):
        value = overrides[name]
        shown = list(value) if isinstance(value, tuple) else value
        words += ["--set", f"{name}={json.dumps(shown, separators=(',', ':'), sort_keys=True)}"]
    return words
