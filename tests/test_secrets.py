"""No secret the harness hands out reaches a report or the terminal, even when the worker
prints it: every output file of a campaign and everything it printed is grepped for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine.store import _secrets
from tests._systems import SECRET_FILE_ENV

ROOT = Path(__file__).resolve().parent.parent


def test_a_worker_that_prints_its_secret_leaks_it_nowhere(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    out = tmp_path / "reports"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{SECRET_FILE_ENV: str(secret_file)})
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify", "--system", "tests._systems:PRINTS_ENV"),
            *("--case", "baseline", "--seed", "1", "--report-dir", str(out), "--keep-workdir"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 3, printed  # the worker died on its own: inconclusive
    secret = secret_file.read_text()
    assert len(secret) >= 16
    # the worker did print it, and the harness kept what it printed, masked
    assert "giving up; my credential was ***" in printed, printed
    files = sorted(out.iterdir())
    assert {f.name for f in files} >= {"report.json", "report.md", "report.xml", "report.html"}
    assert "my credential was ***" in (out / "report.json").read_text()
    leaks = [f.name for f in files if secret in f.read_text(errors="replace")]
    assert leaks == [], leaks
    assert secret not in printed
    # nor in the kept work dir's text files (the worker's own stderr file included)
    kept = Path(printed.split("work dir kept: ", 1)[1].split()[0])
    stderr_files = list(kept.rglob("*.stderr"))
    assert stderr_files, sorted(kept.rglob("*"))
    texts = [
        f for f in kept.rglob("*") if f.is_file() and f.suffix in (".stderr", ".stdout", ".jsonl")
    ]
    assert [f.name for f in texts if secret in f.read_text(errors="replace")] == []


def test_scrub_masks_each_secret_handed_out_and_nothing_else() -> None:
    _secrets.hand_out("s3cr3t-value-1234", "short")
    text = "key=s3cr3t-value-1234; short stays; s3cr3t-value-12 stays"
    assert _secrets.scrub(text) == "key=***; short stays; s3cr3t-value-12 stays"
    assert _secrets.scrub_all({"a": ["x s3cr3t-value-1234"], "n": 1}) == {"a": ["x ***"], "n": 1}


def test_a_password_in_the_db_url_query_is_never_shown(tmp_path: Path) -> None:
    """``--db ...?password=`` is a password as much as ``user:password@``: masked in every
    report format, the replay commands and everything printed."""
    base = os.environ.get("CRASH_HARNESS_PG_URL")
    if not base:
        pytest.skip("set CRASH_HARNESS_PG_URL to test PostgreSQL")
    password = "hunter2-query-password"
    url = f"{base}{'&' if '?' in base else '?'}password={password}"
    out = tmp_path / "reports"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify", "--db", url),
            *("--case", "crash@after_claim#1", "--seed", "1", "--report-dir", str(out)),
        ],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed
    assert password not in printed
    leaks = [f.name for f in sorted(out.iterdir()) if password in f.read_text()]
    assert leaks == [], leaks
    assert "password=***" in (out / "report.json").read_text()
