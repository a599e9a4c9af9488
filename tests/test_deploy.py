"""``deploy``: the stop signal at a boundary, the grace, SIGKILL of what is left, and the
next version taking the work over on the same database (``harness.faults.deploy``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.engine.plan import scenario as scenario_mod
from harness.engine.plan.scenario import ScenarioError
from harness.errors import ExitStatus

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, scenario: str, *more: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", scenario, "--report-dir", str(out), *more],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CRASH_HARNESS_TMPDIR": str(tmp_path)},
        check=False,
    )
    report = json.loads((out / "report.json").read_text()) if out.is_dir() else {}
    return done.returncode, report, done.stdout + done.stderr


def test_the_reference_holds_across_a_deploy_at_each_boundary(tmp_path: Path) -> None:
    code, report, said = _run(tmp_path, "fault-deploy", "--determinism", "0")
    assert code == ExitStatus.PASSED, said
    deployed = [c for c in report["cases"] if c["id"].startswith("deploy@")]
    assert len(deployed) == 4, said
    for case in deployed:
        (landing,) = case["landings"]
        assert landing["landing"] == "landed", landing
        assert "version 2 (reference) takes over from reference" in landing["detail"], landing
        first, *after = case["workers"]
        assert first["outcome"] == "stopped", case["workers"]
        assert first["signal"] == "SIGTERM", first  # no handler: SIGTERM ends it at once
        assert after, case["workers"]  # the next version ran
        assert after[-1]["outcome"] == "completed", case["workers"]


def test_a_next_version_that_derives_its_keys_anew_sends_twice(tmp_path: Path) -> None:
    code, report, said = _run(tmp_path, "mutant-rekeyed-upgrade")
    assert code == ExitStatus.PASSED, said  # the expected violation was found
    (case,) = report["cases"]
    failed = {n for n, r in case["invariants"].items() if r["status"] == "fail"}
    assert "exactly_once_effect" in failed, case["invariants"]
    assert case["verdict"] == "fail"
    assert [w["landing"] for w in case["landings"]] == ["landed"], case["landings"]


def test_the_same_case_with_the_same_version_next_holds(tmp_path: Path) -> None:
    """The gate of the test above: the very case, with ``next`` the reference again (the
    fixed upgrade keeps the stored key), passes; only the version switch makes it fail."""
    path = tmp_path / "same.toml"
    text = (scenario_mod.builtin_dir() / "mutant-rekeyed-upgrade.toml").read_text()
    path.write_text(
        text.replace('next = "harness.mutants._upgrades:REKEYED"', 'next = "reference"').replace(
            '[expect]\nviolation = "exactly_once_effect"', ""
        )
    )
    code, report, said = _run(tmp_path, str(path))
    assert code == ExitStatus.PASSED, said
    assert report["cases"][0]["verdict"] == "pass", said


def test_the_migration_runs_between_the_versions(tmp_path: Path) -> None:
    path = tmp_path / "migrate.toml"
    path.write_text(
        '[scenario]\nsystem = "reference"\nseed = 1\n'
        '[worker]\nnext = "reference"\nprepare_next = "tests._deploy_hooks:migrate"\n'
        '[cases]\nmode = "list"\nlist = ["deploy@after_claim#1"]\n'
    )
    code, _, said = _run(tmp_path, str(path), "--keep-workdir")
    assert code == ExitStatus.PASSED, said
    (ledger,) = tmp_path.glob("crash-harness-*/deploy_after_claim_1/*.sqlite")

    with sqlite3.connect(ledger) as conn:
        assert conn.execute("SELECT by FROM migrated").fetchall() == [("migration",)]
    trace = (ledger.parent / "trace.jsonl").read_text().splitlines()
    deploys = [json.loads(line) for line in trace if '"deploy"' in line]
    assert [d["detail"]["version"] for d in deploys] == [2], deploys


@pytest.mark.parametrize(
    ("worker", "field", "said"),
    [
        ('prepare_next = "tests._deploy_hooks:migrate"', "prepare_next", "needs a next version"),
        ('next = "nosuch.module:V2"', "next", "nosuch"),
    ],
)
def test_a_bad_next_version_is_refused_at_its_line(
    tmp_path: Path, worker: str, field: str, said: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        f'[scenario]\nsystem = "reference"\n[worker]\n{worker}\n'
        '[cases]\nmode = "list"\nlist = ["deploy@after_claim#1"]\n'
    )
    with pytest.raises(ScenarioError) as caught:
        scenario_mod.load(path).campaign_fields()
    message = str(caught.value)
    assert f"{path}:4" in message, message
    assert field in message, message
    assert said in message, message


def test_the_example_tells_a_graceful_version_one_from_one_that_ends_at_once(
    tmp_path: Path,
) -> None:
    """examples/deploy: v1 with no handler ends by SIGTERM mid-delivery, and the naive v2
    sends again; the graceful v1 finishes the delivery at hand and exits 0, so the same
    naive v2 has nothing to get wrong."""
    outcomes = {}
    for name in ("naive", "fixed", "graceful"):
        (tmp_path / name).mkdir()
        code, report, said = _run(
            tmp_path / name,
            str(ROOT / "examples" / "deploy" / f"{name}.toml"),
            "--determinism",
            "0",
        )
        assert code == (ExitStatus.VIOLATION if name == "naive" else ExitStatus.PASSED), said
        case = next(c for c in report["cases"] if c["id"] == "deploy@after_send#1")
        detail = case["landings"][0]["detail"]
        v2 = "v2_fixed" if name == "fixed" else "v2_naive"
        assert f"version 2 (cmd:python -m examples.deploy.{v2}) takes over" in detail, detail
        first = case["workers"][0]
        outcomes[name] = (first["outcome"], first["exit_code"], first["signal"])
    assert outcomes == {
        "naive": ("stopped", None, "SIGTERM"),
        "fixed": ("stopped", None, "SIGTERM"),
        "graceful": ("stopped", 0, None),
    }
