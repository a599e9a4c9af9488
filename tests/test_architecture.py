"""The rooms hold: no import circle, subjects use only the public face, the engine no subject,
the engine's rooms import only downwards and never the reports.

Read from the source (every import, including those inside functions and those under
``if TYPE_CHECKING:``), so neither a lazy import nor a type-only one can hide a circle or a
reach into the wrong room. What the rooms are is said in ``harness/__init__.py``,
``harness/engine/__init__.py`` and each room's ``__init__``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "fake_providers")
#: the systems under test the harness ships; they come in through the door a user has
SUBJECTS = ("harness.reference", "harness.mutants")
#: modules directly in ``harness/`` that are no part of the public face
NOT_PUBLIC = frozenset({"harness.__main__", "harness.pytest_plugin"})
#: the most modules ``harness/`` may hold at its top (``__init__`` and ``__main__`` count)
MOST_TOP_MODULES = 15
#: the engine's rooms, lowest first: a room imports only itself and the rooms before it
#: (``results`` is the one module beside them: the types the engine hands to its readers)
ENGINE_ROOMS = ("store", "process", "plan", "results", "case", "search")
#: what no engine module imports: the engine hands results out, it never reads reports
NOT_FOR_THE_ENGINE = ("harness.reports", "harness.cli", "harness.pytest_plugin", "harness.agents")


@dataclass(frozen=True)
class Import:
    """One import of one module by another, and where it is written."""

    source: str
    target: str
    where: str


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package) for every module of the two packages."""
    found: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = (path, is_package)
    return found


def _owner(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The module of ours that ``name`` (a module or a name in one) lives in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(modules: dict[str, tuple[Path, bool]]) -> list[Import]:
    """Every import between our modules, with file and line."""
    found: list[Import] = []
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import x``, mod
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            for target in targets:
                owner = _owner(target, modules)
                if owner is not None and owner != name:
                    found.append(Import(name, owner, where))
    return found


def circles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _is_subject(name: str) -> bool:
    return any(name == s or name.startswith(s + ".") for s in SUBJECTS)


def _is_public(name: str) -> bool:
    """The public face: ``harness`` and the modules directly in it (``fake_providers`` as a
    package: its private modules are not a subject's business either)."""
    if name in ("harness", "fake_providers"):
        return True
    return name.count(".") == 1 and name.startswith("harness.") and name not in NOT_PUBLIC


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    found = imports_of(_modules())
    # the walker must see what is there: one import known to exist at module level, and one
    # written inside a function (the CLI group imports its commands' helpers lazily)
    pairs = {(e.source, e.target) for e in found}
    assert ("harness.engine.case.campaign", "harness.engine.process.supervisor") in pairs
    assert ("harness.cli", "harness.cli.scenario") in pairs
    # and one written under ``if TYPE_CHECKING:`` (the reports name the results' types)
    assert ("harness.reports._contract", "harness.engine.results") in pairs
    return found


def test_no_import_circle(edges: list[Import]) -> None:
    """No group of modules imports itself round, not even through a function-level import."""
    found = circles(edges)
    shown = [" -> ".join(group) for group in found]
    assert not found, "import circles:\n" + "\n".join(shown)


def test_subjects_import_only_the_public_face(edges: list[Import]) -> None:
    """The reference and the mutants use only what a user's system may: the modules directly
    in ``harness/`` (and each other), never the engine, the CLI, faults or checkers."""
    wrong = [
        f"{e.where}: {e.source} imports {e.target}"
        for e in edges
        if _is_subject(e.source) and not (_is_subject(e.target) or _is_public(e.target))
    ]
    assert not wrong, "a subject reaches past the public face:\n" + "\n".join(wrong)


def test_the_engine_imports_no_subject(edges: list[Import]) -> None:
    """Nothing outside the subjects' packages imports them: the harness finds its own
    subjects by ``module:attr``, as it finds a user's (``harness.systems.SUBJECTS``)."""
    wrong = [
        f"{e.where}: {e.source} imports {e.target}"
        for e in edges
        if _is_subject(e.target) and not _is_subject(e.source)
    ]
    assert not wrong, "the engine imports a subject:\n" + "\n".join(wrong)


def test_the_subject_registry_names_importable_systems() -> None:
    """The names the harness finds its subjects by resolve to Systems (a renamed module
    would otherwise only show when ``--system reference`` is run)."""
    from harness import systems

    assert systems.resolve("reference").name == "reference"
    catalogue = systems.mutant_catalogue()
    assert catalogue, systems.MUTANTS
    first = sorted(catalogue)[0]
    assert systems.resolve(f"mutant:{first}").name == f"mutant:{first}"


def _room_of(name: str) -> str | None:
    """The engine room ``name`` lives in (``None``: not the engine, or the engine's package)."""
    if not name.startswith("harness.engine."):
        return None
    return name.split(".")[2]


def room_breaches(edges: list[Import], modules: set[str]) -> list[str]:
    """Every import that breaks the engine's room rules, said with its file and line."""
    wrong = [
        f"harness/engine/{name.split('.')[2]}: not a room of {ENGINE_ROOMS}"
        for name in sorted(modules)
        if name.startswith("harness.engine.") and _room_of(name) not in ENGINE_ROOMS
    ]
    for e in edges:
        source, target = _room_of(e.source), _room_of(e.target)
        if source is None:
            continue
        if any(e.target == f or e.target.startswith(f + ".") for f in NOT_FOR_THE_ENGINE):
            wrong.append(f"{e.where}: {e.source} imports {e.target} (the engine hands out)")
        elif target is not None and ENGINE_ROOMS.index(target) > ENGINE_ROOMS.index(source):
            wrong.append(f"{e.where}: {e.source} ({source}) imports {e.target} (room {target})")
    return sorted(set(wrong))


def test_the_engine_rooms_import_only_downwards(edges: list[Import]) -> None:
    """Each module of the engine is in a room, and a room imports only itself and the rooms
    below it (``ENGINE_ROOMS``); no engine module imports the reports or the command line."""
    wrong = room_breaches(edges, set(_modules()))
    assert not wrong, "the engine's rooms are broken:\n" + "\n".join(wrong)


def test_the_room_rules_fire() -> None:
    """The rule sees a wrong-room import, a reach into the reports and a module outside
    every room (so a rule that reads nothing cannot pass)."""
    modules = {"harness.engine.store.trace", "harness.engine.case.campaign", "harness.engine.x"}
    edges = [
        Import("harness.engine.store.trace", "harness.engine.case.campaign", "a.py:1"),
        Import("harness.engine.case.campaign", "harness.reports", "b.py:2"),
        Import("harness.engine.case.campaign", "harness.engine.store.trace", "c.py:3"),
    ]
    wrong = room_breaches(edges, modules)
    assert any(w.startswith("a.py:1") for w in wrong), wrong
    assert any(w.startswith("b.py:2") for w in wrong), wrong
    assert any("harness/engine/x" in w for w in wrong), wrong
    assert not any(w.startswith("c.py:3") for w in wrong), wrong
    assert circles([Import("a", "b", "x:1"), Import("b", "a", "y:2")]) == [["a", "b"]]


def test_the_top_of_harness_stays_small() -> None:
    """``harness/`` keeps at most ``MOST_TOP_MODULES`` modules at its top: a new one finds its
    room instead of landing beside the public face."""
    top = sorted(p.name for p in (ROOT / "harness").glob("*.py"))
    assert len(top) <= MOST_TOP_MODULES, top
