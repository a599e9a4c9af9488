"""Ctrl-C mid-campaign leaves a valid partial report; ``certify --resume`` finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.reports import load_report

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "mutant:transcript_rebuild"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


def _certify(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "certify", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _interrupt_after_first_case(cwd: Path) -> tuple[int, list[str], str]:
    """Start a full campaign, SIGINT it as soon as its first case line is printed."""
    err_path = cwd / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness",
                "certify",
                "--system",
                SYSTEM,
                "--seed",
                "2",
                "--report-dir",
                "out",
            ],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        seen: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                seen.append(line)
                if line.startswith(("  ok ", "  FAIL", "  ???")):
                    proc.send_signal(signal.SIGINT)
                    break
            rest, _ = proc.communicate(timeout=120)
            seen += rest.splitlines(keepends=True)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, seen, err_path.read_text()


def test_interrupted_campaign_leaves_a_partial_report_that_resume_completes(
    tmp_path: Path,
) -> None:
    """SIGINT after case 1: a valid partial report (all formats say so); --resume runs the rest."""
    code, out, err = _interrupt_after_first_case(tmp_path)
    assert code == 130, "".join(out) + err
    assert "interrupted" in err
    report_path = tmp_path / "out" / "report.json"
    assert "partial report" in err
    assert f"--resume {Path('out') / 'report.json'}" in err
    partial = load_report(report_path)  # validates against the schema
    assert partial["partial"] is True
    done = [c["id"] for c in partial["cases"]]
    assert 1 <= len(done) < 13  # baseline, 11 boundaries, accepted.payments#1
    assert done[0] == "baseline"
    assert partial["summary"]["not_run"] == 13 - len(done)
    assert partial["resume"] == f"crash-harness certify --resume {Path('out') / 'report.json'}"
    assert "partial report" in (tmp_path / "out" / "report.md").read_text()
    assert "partial report" in (tmp_path / "out" / "report.html").read_text()
    assert "<skipped" in (tmp_path / "out" / "report.xml").read_text()

    resumed = _certify("--resume", str(report_path), cwd=tmp_path)
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr  # the mutant is caught
    assert f"{len(done)} of 13 case(s) done, running {13 - len(done)}" in resumed.stdout
    for case_id in done:  # the cases already in the report are not run again
        assert f" {case_id} " not in resumed.stdout
    final = load_report(report_path)
    assert final["partial"] is False
    assert final["resume"] is None
    ids = [c["id"] for c in final["cases"]]
    assert ids == final["plan"]["cases"]
    assert len(ids) == len(set(ids)) == 13
    assert final["cases"][: len(done)] == partial["cases"]
    assert final["started_at"] == partial["started_at"]
    assert final["summary"]["cases"] == 13
    assert final["summary"]["boundaries_covered"] == 11
    assert "partial report" not in (tmp_path / "out" / "report.md").read_text()


def test_resume_refuses_flags_that_contradict_the_report(tmp_path: Path) -> None:
    """--resume with another seed, system or case list is bad input naming the conflict."""
    report = tmp_path / "report.json"
    data = json.loads((ROOT / "tests" / "fixtures" / "report_failing.json").read_text())
    data["partial"] = True
    report.write_text(json.dumps(data))
    seed = _certify("--resume", str(report), "--seed", "99", cwd=tmp_path)
    assert seed.returncode == 2
    assert "--seed 99 (the report used seed 1)" in seed.stderr
    system = _certify("--resume", str(report), "--system", "reference", cwd=tmp_path)
    assert system.returncode == 2
    assert "--system reference (the report is for mutant:transcript_rebuild)" in system.stderr
    case = _certify("--resume", str(report), "--case", "baseline", cwd=tmp_path)
    assert case.returncode == 2
    assert "--case cannot be combined with --resume" in case.stderr
    db = _certify("--resume", str(report), "--db", "sqlite:///elsewhere.db", cwd=tmp_path)
    assert db.returncode == 2
    assert "the report used the default per-case SQLite files" in db.stderr
    missing = _certify("--resume", str(tmp_path / "none.json"), cwd=tmp_path)
    assert missing.returncode == 2
    assert "cannot read report" in missing.stderr


def test_resume_of_a_complete_report_runs_nothing(tmp_path: Path) -> None:
    """Resuming a report with every planned case done rewrites it complete and runs no case."""
    report = tmp_path / "report.json"
    report.write_text((ROOT / "tests" / "fixtures" / "report_failing.json").read_text())
    proc = _certify("--resume", str(report), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the fixture has failing cases
    assert "4 of 4 case(s) done, running 0" in proc.stdout
    assert (tmp_path / "report.html").exists()
    assert load_report(report)["summary"]["cases"] == 4
