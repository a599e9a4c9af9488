"""Scenario files (TOML): what to run, against what, and what must come out of it.

A scenario is data, loaded by path, so a user's own files and the built-in ones (shipped
inside the package) are read the same way and a ``scenarios/`` folder in the user's
repository never shadows ours. Every error names the file, the line and the key, and says
what was expected.

Loading is three steps, each in its own module: the TOML read with its text kept for line
numbers (``_scenario_toml``), every table held to the schema (``_scenario_schema``), and the
``Scenario`` built section by section (``_scenario_build``). Callers import from here.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from harness.engine.plan._scenario_build import build
from harness.engine.plan._scenario_schema import check_tables
from harness.engine.plan._scenario_toml import ScenarioError, read
from harness.engine.plan._scenario_type import Scenario
from harness.engine.store import _paths
from harness.errors import BadInputError

__all__ = ["Scenario", "ScenarioError", "builtin_dir", "builtin_paths", "load", "resolve_path"]


def load(path: Path) -> Scenario:
    """Read and validate one scenario file."""
    source = read(path)
    check_tables(source)
    return build(source)


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
