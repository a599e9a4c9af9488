"""The public API a user's worker needs is importable from ``harness`` itself, and
``import harness`` stays light: a production worker that only calls ``boundary()`` pays for
one small module, not SQLAlchemy."""

from __future__ import annotations

import subprocess
import sys

import pytest

import harness

PUBLIC = (
    "boundary",
    "note",
    "jobs",
    "planned_work",
    "simple_system",
    "Job",
    "LedgerAdapter",
    "WorkerConfig",
)


def test_the_public_names_come_from_harness() -> None:
    from harness import usersystem, worker_config

    for name in PUBLIC:
        assert name in harness.__all__
        assert name in dir(harness)
    assert harness.simple_system is usersystem.simple_system
    assert harness.LedgerAdapter is usersystem.LedgerAdapter
    assert harness.WorkerConfig is worker_config.WorkerConfig


def test_import_harness_loads_nothing_heavy() -> None:
    probe = (
        "import sys, harness; from harness import boundary, note;"
        " heavy = [m for m in ('sqlalchemy', 'requests', 'harness.usersystem')"
        " if m in sys.modules];"
        " print(heavy); from harness import simple_system;"
        " print('sqlalchemy' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]", out
    assert out[1] == "True", out  # the lazy name really loads what it needs


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="nope"):
        harness.nope  # noqa: B018
