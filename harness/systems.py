"""Systems under test: the reference, the mutants, or a user's ``module:attr``.

A ``System`` bundles what the harness needs to drive a worker: its entry point, the
boundaries it declares, how to create its schema, and how to read its ledger.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from harness.errors import UnknownSystemError
from harness.invariants import LedgerSnapshot
from harness.names import BOUNDARIES
from harness.worker_config import WorkerConfig


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


def _reference() -> System:
    from harness.reference import schema, snapshot, worker

    def prepare(engine: Engine) -> None:
        schema.Base.metadata.create_all(engine)

    return System(
        name="reference",
        description="the ledger and worker that do it right",
        main=worker.main,
        prepare=prepare,
        read_ledger=snapshot.read_ledger,
    )


def resolve(name: str) -> System:
    """Turn ``--system`` into a System, or say clearly what exists."""
    if name == "reference":
        return _reference()
    if name.startswith("mutant:"):
        from harness.mutants import CATALOGUE

        key = name.split(":", 1)[1]
        if key not in CATALOGUE:
            raise UnknownSystemError(
                f"--system: unknown mutant {key!r}; known mutants: {', '.join(sorted(CATALOGUE))}"
            )
        return CATALOGUE[key]()
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UnknownSystemError(f"--system: cannot import {module_name!r}: {exc}") from None
        found = getattr(module, attr, None)
        if not isinstance(found, System):
            raise UnknownSystemError(
                f"--system: {name!r} is not a harness.systems.System (got {type(found).__name__})"
            )
        return found
    raise UnknownSystemError(
        f"--system: {name!r} is not 'reference', 'mutant:NAME' or 'module:attr'"
    )
