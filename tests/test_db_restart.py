"""The database server restarting: planned (``db_restart``, on a throwaway server the
harness makes) and not (a server that goes away under the harness's own reads).

Before this, a PostgreSQL restart in the middle of a reference certify ended the run with
"internal error in crash-harness" and exit 4. Now a planned restart is a fault whose
worker-side handling is judged, and an unplanned one makes the harness read again once the
server is back, or give the case up as unknown with the reason: never a traceback, never
a pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from harness import systems
from harness.engine.case import campaign as campaign_mod
from harness.engine.case import observe, run
from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.process import _pg_cluster
from harness.engine.store import _outage
from harness.invariants import Status
from tests._procs import interrupt_when_ready, processes_with
from tests._services import needs_pg_binaries

ROOT = Path(__file__).resolve().parent.parent

pytestmark = needs_pg_binaries


def _harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CRASH_HARNESS_TMPDIR": str(tmp_path)},
        check=False,
    )


def _servers_under(tmp_path: Path) -> list[str]:
    """Command lines of live processes that run a server out of ``tmp_path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(tmp_path) in cmd and "postgres" in cmd:
            found.append(cmd)
    return found


def test_the_reference_holds_across_database_restarts_and_no_server_is_left(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report"
    done = _harness(
        tmp_path, "run", "fault-db-restart", "--report-dir", str(out), "--determinism", "0"
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "db postgresql, a throwaway server the harness made" in said, said
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    restarted = [c for c in report["cases"] if c["id"].startswith("db_restart@")]
    assert len(restarted) == 4, said
    for case in restarted:
        assert case["verdict"] == "pass", case["id"]
        (step,) = case["landings"]
        assert step["landing"] == "landed", step
        assert "database server restarted" in step["detail"], step
        # the reference lets the lost connection end the process; a fresh one finishes
        first = case["workers"][0]
        assert first["outcome"] in ("exited_after_crash", "completed"), case["workers"]
        assert case["workers"][-1]["outcome"] == "completed", case["workers"]
    assert not list(tmp_path.glob("crash-harness-pg-*")), list(tmp_path.iterdir())
    assert _servers_under(tmp_path) == []
    # the replay names no --db: the server it ran on is gone, the next run makes its own
    assert "--db" not in restarted[0]["replay"], restarted[0]["replay"]


def test_a_restart_is_refused_on_sqlite_in_one_line(tmp_path: Path) -> None:
    done = _harness(
        tmp_path,
        *("run", "fault-db-restart", "--db", f"sqlite:///{tmp_path / 'l.sqlite'}"),
        *("--report-dir", str(tmp_path / "r")),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "db_restart restarts a database server and SQLite has none" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.fixture
def given_server() -> Any:
    """A server the harness is *given* (``--db``), as a user's would be: the test, not
    the harness, stops and starts it."""
    server = _pg_cluster.create()
    _pg_cluster._OWN.pop(server.port, None)  # not the harness's own: never restarted by it
    try:
        yield server
    finally:
        server.remove()


def _settings(server: _pg_cluster.Cluster, tmp_path: Path, cases: list[str]) -> CampaignSettings:
    return CampaignSettings(
        system=systems.resolve("reference"),
        seed=3,
        db_url=server.url,
        cases=[CaseSpec.parse(c) for c in cases],
        workdir=tmp_path / "w",
    )


def _back_on_first_look(server: _pg_cluster.Cluster, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The server comes back when the harness first looks whether it has (counted)."""
    looks: list[int] = []
    answers = _outage.answers

    def look(url: str) -> bool:
        if not looks:
            server.start()
        looks.append(1)
        return answers(url)

    monkeypatch.setattr(_outage, "answers", look)
    return looks


def test_a_server_gone_as_the_ledger_is_read_is_read_again_once_back(
    given_server: _pg_cluster.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = observe.observe_case
    calls: list[int] = []

    def gone_on_first_read(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            given_server.stop()
        calls.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(observe, "observe_case", gone_on_first_read)
    looks = _back_on_first_look(given_server, monkeypatch)
    (case,) = run_campaign(_settings(given_server, tmp_path, ["baseline"])).cases
    assert len(calls) == 2, calls  # read, the server went away, read again once back
    assert looks, "the harness never waited for the server"
    assert case.verdict is Status.PASS, case.notes
    assert any("as the harness read the case's ledger" in n for n in case.notes), case.notes


def test_a_server_gone_in_the_middle_of_a_case_gives_it_up_as_unknown(
    given_server: _pg_cluster.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = run.run_steps

    def gone_mid_case(prepared: Any, case: Any) -> Any:
        ended = steps(prepared, case)
        given_server.stop()
        with prepared.ctx.target.engine().connect() as conn:  # the harness's own read
            conn.execute(text("SELECT 1"))
        return ended

    monkeypatch.setattr(campaign_mod.run, "run_steps", gone_mid_case)
    _back_on_first_look(given_server, monkeypatch)
    cases = run_campaign(_settings(given_server, tmp_path, ["baseline"])).cases
    (case,) = cases
    assert case.verdict is Status.UNKNOWN, case.notes
    assert "the database server went away during the case" in (case.undecided_because or "")
    assert case.invariants == {}  # no invariant is failed, none passed


def test_a_server_that_stays_away_gives_up_the_case_and_runs_no_more(
    given_server: _pg_cluster.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = run.run_steps

    def gone_for_good(prepared: Any, case: Any) -> Any:
        ended = steps(prepared, case)
        given_server.stop()
        return ended

    monkeypatch.setattr(campaign_mod.run, "run_steps", gone_for_good)
    monkeypatch.setattr(_outage, "BACK_WITHIN_S", 0.5)
    cases = run_campaign(
        _settings(given_server, tmp_path, ["baseline", "crash@after_claim#1"])
    ).cases
    assert [c.verdict for c in cases] == [Status.UNKNOWN, Status.UNKNOWN], [c.notes for c in cases]
    assert "did not take connections again within 0.5s" in (cases[0].undecided_because or "")
    assert cases[1].notes[0].startswith("not run: the database server went away"), cases[1].notes


def test_ctrl_c_leaves_no_server_and_no_data_dir(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGINT while a worker of a campaign on a throwaway server hangs: the command exits,
    and neither the server (its own session: Ctrl-C never reaches it) nor its data stays."""
    marker = uuid.uuid4().hex
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    scenario = tmp_path / "hangs.toml"
    scenario.write_text(
        '[scenario]\nsystem = "tests._systems:HANGS"\n'
        '[cases]\nmode = "list"\nlist = ["baseline", "db_restart@after_claim#1"]\n'
    )
    # a scratch dir the server's user may enter (a root run's tmp_path is private), so its
    # data dir is made in it and can be looked for afterwards
    scratch = Path(tempfile.mkdtemp(prefix="ch-test-scratch-"))
    scratch.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(scenario),
            "--report-dir",
            str(tmp_path / "r"),
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "CH_TEST_READY_FIFO": str(fifo),
            "CH_TEST_MARKER": marker,
            "CRASH_HARNESS_TMPDIR": str(scratch),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def server_up() -> None:
        running = [p for p in processes_with(marker) if p != os.getpid()]
        commands = [Path(f"/proc/{p}/cmdline").read_bytes() for p in running]
        assert any(b"postgres" in c for c in commands), commands

    err = interrupt_when_ready(proc, fifo, ready_s=120, check=server_up)
    assert proc.returncode == 130, err
    left = [p for p in processes_with(marker) if p != os.getpid()]
    assert left == [], {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in left}
    assert not list(scratch.glob("crash-harness-pg-*")), list(scratch.iterdir())
