"""A database of its own per PostgreSQL case (``[database] isolation = "database"``), for a
worker that names ``public`` or a framework that makes schemas of its own, which a schema per
case does not keep apart.

On the real server: a worker writing ``public.t`` sees only its own case's rows, in two
campaigns at once; nothing is left after a run, and what a SIGKILLed run left is dropped by
the next run, never while its maker lives; a role that may not create databases is told so
in one line; and without the setting each case is still a schema in the given database.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from harness.engine.store import _owner
from tests._procs import processes_with, wait_ready
from tests.conftest import _pg_url

ROOT = Path(__file__).resolve().parent.parent
#: the listed cases: a run, and a crash where the receiver accepted the first webhook (the
#: restarted worker writes public.t again, in the same case's database)
CASES = ("baseline", "crash@accepted.webhook#1")


@pytest.fixture
def pg_url() -> str:
    url = _pg_url()
    if url is None:
        pytest.skip("set CRASH_HARNESS_PG_URL to test PostgreSQL")
    return url


def _scenario(tmp_path: Path, *, isolation: str | None) -> Path:
    path = tmp_path / "public.toml"
    database = "" if isolation is None else f'[database]\nisolation = "{isolation}"\n'
    path.write_text(
        "[scenario]\n"
        'system = "cmd:python -m tests._public_table"\n'
        'env = { DSN = "{db.dsn}", DATABASE_URL = "{db.url}", SCHEMA = "{db.schema}",'
        ' CASE_ID = "{case.id}", WEBHOOK_URL = "{provider.url}/hooks",'
        ' WEBHOOK_TOKEN = "{provider.credential}" }\n'
        "seed = 1\n"
        "[workload]\nruns = 2\ndestinations_per_topic = 1\n"
        '[provider]\npreset = "webhook"\noptions = { dedupe = false }\nfaults = []\n'
        "[worker]\nmax_attempts = 1\n"
        f'[cases]\nmode = "list"\nlist = {json.dumps(list(CASES))}\n' + database
    )
    return path


def _harness(args: list[str], tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(
    scenario: Path, pg_url: str, tmp_path: Path, token: str, **env: str
) -> subprocess.Popen[str]:
    return _harness(
        ["run", str(scenario), "--db", pg_url, "--report-dir", str(tmp_path / f"r-{token}")],
        tmp_path,
        CH_TEST_RUN_TOKEN=token,
        CH_TEST_EVIDENCE=str(tmp_path / f"{token}.jsonl"),
        **env,
    )


def _evidence(tmp_path: Path, token: str) -> list[dict[str, Any]]:
    lines = (tmp_path / f"{token}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _databases(pg_url: str, *, pid: int | None = None, names: Iterable[str] = ()) -> list[str]:
    """The databases on the server made by harness ``pid`` (by their tag), or named so."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)"
            " OR shobj_description(oid, 'pg_database') LIKE %s ORDER BY datname",
            (list(names), f"{_owner.PREFIX} pid={pid} %" if pid is not None else "-"),
        ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.postgres
def test_two_campaigns_at_once_each_case_sees_only_its_own_public_rows(
    pg_url: str, tmp_path: Path
) -> None:
    """Two runs of one scenario (the same case ids) at once, each case writing public.t:
    every incarnation sees its own row alone, in a database of its case's own (a rerun of a
    case, the determinism sample's, gets another), reached with no search_path; a crashed
    case's restart is back in the same database; and once the runs are over none of their
    databases is left."""
    scenario = _scenario(tmp_path, isolation="database")
    runs = {token: _run(scenario, pg_url, tmp_path, token) for token in ("one", "two")}
    given = make_url(pg_url).database
    used: dict[str, set[str]] = {}
    for token, proc in runs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        assert "db postgresql, a database per case" in out, out
        seen = _evidence(tmp_path, token)
        by_database: dict[str, list[str]] = {}
        for line in seen:
            by_database.setdefault(line["database"], []).append(line["me"])
            assert line["seen"] == [line["me"]], line  # nobody else's row, in either run
            assert line["database"].startswith("ch_"), line
            assert line["database"] != given
            assert (line["schema"], line["db_schema"]) == ("public", "public")
            assert "options=" not in line["dsn"] + line["db_url"], line
        whose = {db: sorted(set(mes)) for db, mes in by_database.items()}
        assert sorted({me for mes in whose.values() for me in mes}) == sorted(
            f"{token}:{case}" for case in CASES
        ), whose
        for database, mes in by_database.items():
            assert len(set(mes)) == 1, (database, mes)  # one case's alone
            # the crash case's restart works on in the database its first worker had
            assert len(mes) == (2 if mes[0].endswith("#1") else 1), (database, mes)
        used[token] = set(by_database)
        assert _databases(pg_url, pid=proc.pid) == []  # its template too
    assert not used["one"] & used["two"]
    assert _databases(pg_url, names=[*used["one"], *used["two"]]) == []


@pytest.mark.postgres
def test_without_the_setting_a_case_is_still_a_schema_and_public_is_shared(
    pg_url: str, tmp_path: Path
) -> None:
    """The default is unchanged: each case is a schema of the given database, reached by
    search_path; a worker naming public.T therefore reads another case's row there (what the
    setting is for)."""
    table = f"ch_test_{uuid.uuid4().hex[:12]}"  # public of the given database is everyone's
    scenario = _scenario(tmp_path, isolation=None)
    try:
        proc = _run(scenario, pg_url, tmp_path, "only", CH_TEST_PUBLIC_TABLE=table)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        assert "· db postgresql\n" in out, out
        seen = _evidence(tmp_path, "only")
        for line in seen:
            assert line["database"] == make_url(pg_url).database, line
            assert line["schema"].startswith("ch_"), line
            assert line["db_schema"] == line["schema"]
            assert f"options=-csearch_path%3D{line['schema']}" in line["dsn"], line
            assert f"options=-csearch_path%3D{line['schema']}" in line["db_url"], line
        assert any(set(line["seen"]) - {line["me"]} for line in seen), seen
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")


@pytest.mark.postgres
def test_a_role_that_may_not_create_databases_is_told_in_one_line(
    pg_url: str, tmp_path: Path
) -> None:
    role = f"ch_nocreatedb_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOCREATEDB")
    try:
        url = make_url(pg_url).set(username=role).render_as_string(hide_password=False)
        proc = _harness(
            [
                *("certify", "--case", "baseline", "--seed", "1", "--db", url),
                *("--set", 'db_isolation="database"', "--report-dir", str(tmp_path / "r")),
            ],
            tmp_path,
        )
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, out + err
        assert err.count("\n") == 1, err
        assert err.startswith('error: db_isolation = "database"'), err
        assert f"refuses CREATE DATABASE to role '{role}'" in err, err
        assert f"ALTER ROLE {role} CREATEDB" in err, err
        assert "baseline" not in out, out  # refused before any case
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.postgres
def test_a_killed_runs_databases_stay_while_it_lives_and_go_with_the_next_run(
    pg_url: str, tmp_path: Path
) -> None:
    """A run SIGKILLed mid-case leaves its case's database and its template; a sweep while
    it still runs leaves them be (they are a live run's), the next run drops them (even one
    in the default, schema per case)."""
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    marker = uuid.uuid4().hex
    killed = _harness(
        [
            *("certify", "--system", "tests._systems:HANGS", "--case", "baseline", "--seed", "1"),
            *("--db", pg_url, "--set", 'db_isolation="database"'),
            *("--report-dir", str(tmp_path / "r1")),
        ],
        tmp_path,
        CH_TEST_READY_FIFO=str(fifo),
        CH_TEST_MARKER=marker,
    )
    try:
        wait_ready(fifo, 120)  # its worker runs: the case's database is made
        left = _databases(pg_url, pid=killed.pid)
        assert len(left) == 2, left  # the case's and the campaign's template
        swept = subprocess.run(
            [sys.executable, "-m", "harness", "clean", "--db", pg_url],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert swept.returncode == 0, swept.stdout + swept.stderr
        assert _databases(pg_url, pid=killed.pid) == left  # a live run's: untouched
        killed.kill()  # SIGKILL: its databases stay behind (any run's sweep may take them now)
        killed.communicate(timeout=60)
        nxt = _harness(
            [
                *("certify", "--case", "baseline", "--seed", "2", "--db", pg_url),
                *("--report-dir", str(tmp_path / "r2")),
            ],
            tmp_path,
        )
        out, err = nxt.communicate(timeout=300)
        assert nxt.returncode == 0, out + err
        assert _databases(pg_url, names=left) == []
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
        for pid in processes_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_setting_is_checked_as_a_scenario_file_and_set_would_be(tmp_path: Path) -> None:
    from harness.engine.plan import _overrides
    from harness.engine.plan import scenario as scenario_mod
    from harness.errors import BadInputError

    path = _scenario(tmp_path, isolation="database")
    assert scenario_mod.load(path).campaign_fields()["db_isolation"] == "database"
    path.write_text(path.read_text().replace('isolation = "database"', 'isolation = "cluster"'))
    with pytest.raises(BadInputError, match=r"\[database\.isolation\] expected schema"):
        scenario_mod.load(path)
    assert _overrides.parse('db_isolation="database"') == ("db_isolation", "database")
    with pytest.raises(BadInputError, match="db_isolation: expected schema or database"):
        _overrides.parse('db_isolation="cluster"')


def test_a_case_database_fills_its_templates_with_no_search_path() -> None:
    """{db.url} and {db.dsn} name the case's own database, with no search_path; {db.schema}
    is public, where its tables are."""
    from harness.engine.plan._worker_env import render
    from harness.engine.store._db import DatabaseTarget
    from harness.worker_config import WorkerConfig

    config = WorkerConfig(
        db=DatabaseTarget(
            "postgresql+psycopg://u:pw@h:5433/ch_baseline_a1b2c3",
            server_url="postgresql+psycopg://u:pw@h:5433/db",
        ),
        provider_url="http://127.0.0.1:4100/epoch/3",
        credential_id="c1",
        credential_secret="s3",
        destination_scope="*",
        worker_name="w1",
        case_id="baseline",
    )
    assert render("{db.url}", config) == "postgresql+psycopg://u:pw@h:5433/ch_baseline_a1b2c3"
    assert render("{db.dsn}", config) == "postgresql://u:pw@h:5433/ch_baseline_a1b2c3"
    assert render("{db.schema}", config) == "public"


@pytest.mark.postgres
def test_a_backup_restored_into_a_case_database_is_caught_replaying(
    pg_url: str, tmp_path: Path
) -> None:
    """restore_backup snapshots every schema of a case's own database and restores it: the
    mutant that trusts its restored ledger resends, and is caught."""
    proc = _harness(
        [
            *("run", "mutant-trusts-restored-ledger", "--db", pg_url),
            *("--set", 'db_isolation="database"', "--report-dir", str(tmp_path / "r")),
        ],
        tmp_path,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "expected violation restore_no_replay was found" in out, out
    assert _databases(pg_url, pid=proc.pid) == []
