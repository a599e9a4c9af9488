"""Per-instance preset options: declared once, parsed from JSON, CLI strings or Python values.

A preset declares its knobs (windows, lookup switches, rendering switches) as ``Option``
records; ``ProviderProcess.start(options={...})``, ``python -m fake_providers serve
--option NAME=VALUE`` and ``crash-harness providers serve --NAME VALUE`` all end up in
``resolve_options``, so every path validates the same way and unknown names are an error,
never silently ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fake_providers._errors import ProviderError
from fake_providers._identify import Identify

OptionKind = Literal["seconds", "bool", "int", "globs", "identify"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class Option:
    """One knob of a preset: its name, kind, default, bounds and one line of help."""

    name: str
    kind: OptionKind
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    #: a further check of a parsed value (raises ``ProviderError`` saying what is wrong)
    check: Callable[[Any], None] | None = field(default=None, compare=False)

    @property
    def flag(self) -> str:
        """The command-line spelling, e.g. ``--window-s``."""
        return "--" + self.name.replace("_", "-")

    def parse(self, value: object) -> Any:
        """Validate ``value`` (a Python/JSON value or a CLI string) and return it typed."""
        where = f"option {self.name!r}"
        if self.kind == "bool":
            return self._parse_bool(value, where)
        if self.kind == "globs":
            items = self._parse_globs(value, where)
            if self.check is not None:
                self.check(items)
            return items
        if self.kind == "identify":
            return Identify.parse(value)
        number = self._parse_number(value, where)
        if self.minimum is not None and number < self.minimum:
            raise ProviderError(f"{where} must be >= {self.minimum:g}, got {number:g}")
        if self.maximum is not None and number > self.maximum:
            raise ProviderError(f"{where} must be <= {self.maximum:g}, got {number:g}")
        return int(number) if self.kind == "int" else float(number)

    def _parse_bool(self, value: object, where: str) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ProviderError(f"{where} must be true or false, got {value!r}")

    def _parse_globs(self, value: object, where: str) -> tuple[str, ...]:
        if isinstance(value, str):
            items: list[object] = [v for v in value.split(",") if v]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise ProviderError(f"{where} must be a list of globs, got {value!r}")
        if not all(isinstance(v, str) and v for v in items):
            raise ProviderError(f"{where} must be a list of non-empty strings, got {value!r}")
        return tuple(str(v) for v in items)

    def _parse_number(self, value: object, where: str) -> float:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ProviderError(f"{where} must be a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProviderError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ProviderError(f"{where} must be finite, got {value!r}")
        if self.kind == "int" and value != int(value):
            raise ProviderError(f"{where} must be a whole number, got {value!r}")
        return float(value)


def resolve_options(
    preset: str, declared: tuple[Option, ...], given: Mapping[str, object] | None
) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (validated); an unknown name is a ``ProviderError``."""
    known = {option.name: option for option in declared}
    unknown = sorted(set(given or {}) - set(known))
    if unknown:
        names = ", ".join(sorted(known)) or "none"
        raise ProviderError(f"preset {preset!r} has no option(s) {unknown}; its options: {names}")
    resolved = {option.name: option.default for option in declared}
    for name, value in (given or {}).items():
        resolved[name] = known[name].parse(value)
    return resolved


def parse_assignment(text: str) -> tuple[str, str]:
    """Split ``NAME=VALUE`` (``--option`` on the command line)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ProviderError(f"expected NAME=VALUE, got {text!r}")
    return name.strip().replace("-", "_"), value


def switch(name: str, *, default: bool, help: str) -> Option:
    """A true/false option (``--name/--no-name`` on the command line)."""
    return Option(name, "bool", default, help)


def seconds(
    name: str, *, default: float, help: str, minimum: float = 0.0, maximum: float | None = None
) -> Option:
    """A duration in seconds on the provider clock."""
    return Option(name, "seconds", float(default), help, minimum=minimum, maximum=maximum)


def integer(
    name: str, *, default: int, help: str, minimum: int | None = None, maximum: int | None = None
) -> Option:
    """A whole number."""
    return Option(name, "int", default, help, minimum=minimum, maximum=maximum)


def globs(
    name: str,
    *,
    help: str,
    default: tuple[str, ...] = (),
    check: Callable[[tuple[str, ...]], None] | None = None,
) -> Option:
    """A list of fnmatch globs, or of other words (comma-separated, or repeated on the
    command line); ``check`` refuses a list that parses but means nothing."""
    return Option(name, "globs", tuple(default), help, check=check)


IDENTIFY_OPTION: Final = Option(
    "identify",
    "identify",
    Identify(),
    "where run, destination, delivery and recognizer are read from each request"
    " (FIELD=SOURCE, e.g. destination=path:/hooks/{destination}; repeatable)",
)
"""The option every preset takes: its identification rule over the preset's defaults."""


def option_json(value: object) -> object:
    """An option value as JSON (``/_admin/info``, ``--options-json``)."""
    if isinstance(value, Identify):
        return value.to_json()
    if isinstance(value, tuple):
        return list(value)
    return value
