"""Shared fixtures: the database matrix and the slow switch.

Every end-to-end test that takes ``db_url`` runs on SQLite and on the PostgreSQL server named
by ``CRASH_HARNESS_PG_URL``. Outside CI a missing server skips those cases; in CI it fails
them, so a green CI always means both backends ran.
"""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from tests._fresh_venv import FreshVenv, build_fresh_venv

PG_ENV = "CRASH_HARNESS_PG_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: pass --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _pg_url() -> str | None:
    url = os.environ.get(PG_ENV)
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(f"{PG_ENV} is not set; CI must test PostgreSQL")
    return None


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str | None:
    """None means the harness default (a fresh SQLite file per case); else a PostgreSQL URL."""
    if request.param == "sqlite":
        return None
    url = _pg_url()
    if url is None:
        pytest.skip(f"set {PG_ENV} to test PostgreSQL")
    return url


@pytest.fixture(scope="session")
def fresh_venv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> FreshVenv:
    """This checkout's wheel in a venv of its own, built once per run (the slow part of every
    test that runs the installed copy; see ``tests/_fresh_venv.py``). Under pytest-xdist the
    workers share one: the first builds it under a lock, the others read it (tests only run
    what it holds, never change it)."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker: its parent dir is the run's
        base = base.parent
    with open(base / "fresh-venv.lock", "a") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        record = base / "fresh-venv.json"
        if record.exists():
            venv = FreshVenv.from_json(json.loads(record.read_text()), shared=True)
        else:
            venv = build_fresh_venv(base / "fresh-venv")
            record.write_text(json.dumps(venv.to_json()))
    print(
        f"fresh venv: wheel built in {venv.build_s:.1f}s ({venv.wheel.stat().st_size / 1e3:.0f}"
        f" kB), installed in {venv.install_s:.1f}s, {venv.size_bytes / 1e6:.0f} MB"
    )
    return venv


#: what pytest-xdist tells its own workers; a pytest the tests start is not one of them, and
#: the harness's plugin would read these as "this run is one shard of a split sweep"
_XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_for_what_tests_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """So the suite runs the same under ``pytest -n 2`` as serially."""
    for name in _XDIST_ENV:
        monkeypatch.delenv(name, raising=False)
