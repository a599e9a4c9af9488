"""``broker_restart``: the Redis broker the harness starts for a scenario's ``[broker]``
restarts under a worker. The same queue worker (``examples/redis_queue``) loses the jobs
that lived only in a broker without persistence, and loses nothing with an append-only
file: the verdict follows the broker's configuration, not the worker's code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ExitStatus
from tests._procs import interrupt_when_ready, processes_with
from tests._services import needs_redis_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "redis_queue"

pytestmark = needs_redis_server


def _run(tmp_path: Path, scenario: Path) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(scenario),
            "--report-dir",
            str(out),
            "--determinism",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CRASH_HARNESS_TMPDIR": str(tmp_path)},
        check=False,
    )
    report = json.loads((out / "report.json").read_text()) if out.is_dir() else {}
    return done.returncode, report, done.stdout + done.stderr


def _failed(case: dict[str, Any]) -> set[str]:
    return {n for n, r in case["invariants"].items() if r["status"] == "fail"}


def _redis_under(tmp_path: Path) -> list[int]:
    """Live Redis servers started by a run whose scratch dir is ``tmp_path``: Redis
    rewrites its command line and environment, but it works in its ``--dir``, a work dir
    under the run's scratch dir."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if name == "redis-server" and cwd.startswith(str(tmp_path)):
            found.append(int(pid))
    return found


@pytest.mark.parametrize("name", ["lossy", "durable"])
def test_a_broker_restart_loses_the_queue_only_without_persistence(
    tmp_path: Path, name: str
) -> None:
    lost = name == "lossy"
    code, report, said = _run(tmp_path, EXAMPLE / f"{name}.toml")
    assert code == (ExitStatus.VIOLATION if lost else ExitStatus.PASSED), said
    cases = {c["id"]: c for c in report["cases"]}
    restarted = cases["broker_restart@after_enqueue#1"]
    (landing,) = restarted["landings"]
    assert landing["landing"] == "landed", landing
    # the queue (one list, both jobs) was in the broker when it went down; only an AOF
    # brings it back
    persistence = "none" if lost else "aof"
    assert f"({persistence} persistence" in landing["detail"], landing
    assert f"1 key(s) before, {0 if lost else 1} after" in landing["detail"], landing
    assert _failed(restarted) == ({"no_silent_loss"} if lost else set()), restarted["invariants"]
    for other in ("baseline", "broker_restart@job_started#2", "crash@after_provider_accept#1"):
        assert _failed(cases[other]) == set(), (other, cases[other]["invariants"])
    # the broker's password never reaches the report or the console
    assert "redis://:" not in said
    assert "redis://:" not in json.dumps(report)
    assert _redis_under(tmp_path) == []
    assert not list(tmp_path.glob("crash-harness-redis-*")), list(tmp_path.iterdir())


def test_a_broker_placeholder_without_a_broker_is_refused_before_any_case(
    tmp_path: Path,
) -> None:
    text = (EXAMPLE / "lossy.toml").read_text()
    bare = tmp_path / "bare.toml"
    bare.write_text(text.replace('[broker]\npersistence = "none"\n', ""))
    code, _, said = _run(tmp_path, bare)
    assert code == ExitStatus.BAD_INPUT, said
    assert "{broker.url}" in said or "broker_restart" in said, said
    assert "[broker]" in said, said
    assert "Traceback" not in said


def test_ctrl_c_leaves_no_broker_and_no_data_dir(tmp_path: Path) -> None:
    """SIGINT while a worker of a campaign with a [broker] hangs: the command exits, and
    neither the Redis it started (its own session: Ctrl-C never reaches it) nor its dir
    stays."""
    marker = uuid.uuid4().hex
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    scenario = tmp_path / "hangs.toml"
    scenario.write_text(
        '[scenario]\nsystem = "tests._systems:HANGS"\n[broker]\npersistence = "aof"\n'
        '[cases]\nmode = "list"\nlist = ["baseline"]\n'
    )
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
            "CRASH_HARNESS_TMPDIR": str(tmp_path),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def broker_up() -> None:
        assert _redis_under(tmp_path), "no broker was started"

    err = interrupt_when_ready(proc, fifo, ready_s=120, check=broker_up)
    assert proc.returncode == 130, err
    assert _redis_under(tmp_path) == []
    assert [p for p in processes_with(marker) if p != os.getpid()] == []
    assert not list(tmp_path.glob("crash-harness-redis-*")), list(tmp_path.iterdir())
