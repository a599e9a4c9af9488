"""Every printed replay command reruns the case exactly: the same system (found by the
``module:attr`` it is importable as, whatever its name says), the same workload (settings
given beside the system or scenario are restated as ``--set``), the same verdict."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUTBOX = ROOT / "examples" / "outbox" / "outbox_worker.py"


def _harness(args: list[str], cwd: Path, report_dir: Path) -> tuple[int, str, dict[str, Any]]:
    if args[:1] == ["crash-harness"]:
        args = args[1:]
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *args, "--report-dir", str(report_dir)],
        cwd=cwd,
        env=dict(
            os.environ, PYTHONPATH=f"{ROOT}:{cwd}", CRASH_HARNESS_TMPDIR=str(cwd), NO_COLOR="1"
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = proc.stdout + proc.stderr
    path = report_dir / "report.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    return proc.returncode, said, report


def _replays(said: str) -> list[list[str]]:
    return [shlex.split(m) for m in re.findall(r"^\s*replay: (.+)$", said, re.MULTILINE)]


def _verdicts(report: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    return {
        c["id"]: (
            c["verdict"],
            sorted(n for n, r in c["invariants"].items() if r["status"] == "fail"),
        )
        for c in report["cases"]
    }


def test_certify_replay_restates_the_settings_it_ran_with(tmp_path: Path) -> None:
    words = ["certify", "--system", "mutant:new_key_per_attempt", "--seed", "3"]
    words += ["--case", "baseline", "--set", "runs=1", "--set", "destinations_per_topic=1"]
    words += ["--crash-scope", "process"]
    status, said, first = _harness(words, tmp_path, tmp_path / "first")
    assert status == 1, said
    (replay,) = _replays(said)
    assert "runs=1" in replay, replay
    assert "destinations_per_topic=1" in replay, replay
    assert 'crash_scope="process"' in replay, replay
    again_status, again_said, again = _harness(replay, tmp_path, tmp_path / "again")
    assert again_status == status, again_said
    assert _verdicts(again) == _verdicts(first)
    assert again["cases"][0]["effects"] == first["cases"][0]["effects"]


def test_a_system_whose_name_is_not_its_import_path_replays_by_its_import_path(
    tmp_path: Path,
) -> None:
    source = OUTBOX.read_text().replace('name="outbox_worker:SYSTEM"', 'name="mailer"')
    assert 'name="mailer"' in source
    (tmp_path / "mailer_mod.py").write_text(source)
    (tmp_path / "outbox.toml").write_text(
        (ROOT / "examples" / "outbox" / "outbox.toml")
        .read_text()
        .replace("outbox_worker:SYSTEM", "mailer_mod:SYSTEM")
    )
    words = ["certify", "--system", "mailer_mod:SYSTEM", "--seed", "2"]
    words += ["--case", "crash@after_provider_accept#1", "--set", "provider_window_s=0"]
    words += ["--set", "provider_faults=[]", "--set", 'worker_overrides={"max_attempts":1}']
    status, said, first = _harness(words, tmp_path, tmp_path / "first")
    assert status == 1, said  # the duplicate, with dedupe and faults off
    (replay,) = _replays(said)
    assert replay[replay.index("--system") + 1] == "mailer_mod:SYSTEM", replay
    again_status, again_said, again = _harness(replay, tmp_path, tmp_path / "again")
    assert (again_status, _verdicts(again)) == (status, _verdicts(first)), again_said


def test_the_pytest_markers_replay_reruns_the_same_workload(tmp_path: Path) -> None:
    (tmp_path / "test_marked.py").write_text(
        textwrap.dedent(
            """
            import pytest


            @pytest.mark.crash_sweep(
                "mutant:new_key_per_attempt", seed=5, cases=["baseline"], runs=1,
                destinations_per_topic=1,
            )
            def test_mutant():
                pass
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "test_marked.py"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), CRASH_HARNESS_TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    replays = _replays(proc.stdout)
    assert replays, proc.stdout + proc.stderr
    replay = replays[0]
    assert "runs=1" in replay, replay
    assert "destinations_per_topic=1" in replay, replay
    status, said, again = _harness(replay, tmp_path, tmp_path / "again")
    assert status == 1, said
    (case,) = again["cases"]
    assert case["verdict"] == "fail"
    assert "stable_idempotency_key" in proc.stdout
    assert case["invariants"]["stable_idempotency_key"]["status"] == "fail"


@pytest.mark.parametrize(
    ("word", "said"),
    [
        ("runs=0", "--set runs: expected a number from 1 to 50, found 0"),
        ("provider_window_s=NaN", "--set provider_window_s: expected a number from 0"),
        ('worker_overrides={"lease":1}', "unknown key 'lease'"),
        ("nope=1", "unknown setting 'nope'"),
        ("runs", "expected NAME=JSON"),
        ("runs=x", "expected a JSON value"),
    ],
)
def test_a_bad_set_is_refused_in_one_line(tmp_path: Path, word: str, said: str) -> None:
    words = ["certify", "--case", "baseline", "--seed", "1", "--set", word]
    status, output, _ = _harness(words, tmp_path, tmp_path / "r")
    assert status == 2, output
    assert said in output, output
    assert "Traceback" not in output
