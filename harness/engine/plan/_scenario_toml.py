"""A scenario file read into raw tables, with the text kept to point at its lines.

Every check after this one refuses a value by naming the file, the line and the key; the
line is found in the text, so the text travels with the tables instead of the file being
read again. Reading also refuses what would block or overflow a later step (a FIFO, bytes
that are not UTF-8, arrays nested past ``MAX_DEPTH``) before any of them sees it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.engine.store import _paths
from harness.errors import BadInputError

#: how deep a scenario's values may nest: a table, its keys, a list of cases, a list in an
#: override; far more than any field needs, far less than Python's recursion limit
MAX_DEPTH = 8


class ScenarioError(BadInputError):
    """A scenario file is malformed; the message names file, line and key."""


@dataclass(frozen=True)
class ScenarioFile:
    """One scenario file as read: where it is, its text (for line numbers), its tables."""

    path: Path
    text: str
    tables: dict[str, Any]

    def error(self, table: str | None, key: str | None, message: str) -> ScenarioError:
        """The error for ``[table] key`` of this file, at its line."""
        return error_at(self.path, self.text, table, key, message)


def read(path: Path) -> ScenarioFile:
    """Read one scenario file's TOML, or a ``ScenarioError`` saying why it cannot be read."""
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
    return ScenarioFile(path, text, data)


def read_quietly(path: Path) -> str:
    """The file's text for finding a line number, or nothing (the message names the file)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


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


def error_at(
    path: Path, text: str, table: str | None, key: str | None, message: str
) -> ScenarioError:
    """The error for ``[table] key`` of the file at ``path``, at its line in ``text``."""
    line = _line_of(text, table, key)
    where = f"{path}:{line}" if line else str(path)
    dotted = ".".join(x for x in (table, key) if x)
    return ScenarioError(f"{where}: [{dotted}] {message}" if dotted else f"{where}: {message}")


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
