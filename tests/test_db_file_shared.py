"""Runs given the same ``--db`` SQLite file never touch each other's ledgers.

A case deletes its ledger file (and ``-wal``/``-shm``) before it starts; two runs on one
file used to delete each other's ledgers mid-case and fail every case. Each run now holds its
ledger names (``_db.claim_sqlite``): a run that finds the file's names held by a live run
takes names of its own, says so in one line, and every report names the case's ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.engine.store import _db

ROOT = Path(__file__).resolve().parent.parent
CASES = ("baseline", "crash@after_provider_accept#1")


def _certify(tmp_path: Path, db: Path, out: str) -> subprocess.Popen[str]:
    args = ["certify", "--seed", "3", "--db", f"sqlite:///{db}", "--report-dir", out]
    for case in CASES:
        args += ["--case", case]
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ledgers(tmp_path: Path, out: str) -> dict[str, str]:
    report = json.loads((tmp_path / out / "report.json").read_text())
    assert [c["verdict"] for c in report["cases"]] == ["pass"] * len(CASES), report["cases"]
    return {c["id"]: c["ledger"] for c in report["cases"]}


def test_a_run_beside_a_live_run_on_the_file_takes_ledgers_of_its_own(tmp_path: Path) -> None:
    """The test holds the file's names as a live run would, mid-case: the certify leaves
    that run's ledger alone, says whose the file is, and names the ledgers it used."""
    db = tmp_path / "ledger.sqlite"
    claim = _db.claim_sqlite(f"sqlite:///{db}")
    try:
        theirs = _db.ledger_path(db, "baseline")
        theirs.write_bytes(b"the other run's ledger, mid-case")
        proc = _certify(tmp_path, db, "out")
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stdout + stderr
        assert theirs.read_bytes() == b"the other run's ledger, mid-case"
        notes = [ln for ln in stderr.splitlines() if "is in use by another run" in ln]
        assert len(notes) == 1, stderr
        assert str(db) in notes[0]
        assert f"pid {os.getpid()}" in notes[0]
        own = db.with_name("ledger.run2.sqlite")
        assert _ledgers(tmp_path, "out") == {
            case: str(_db.ledger_path(own, _slug(case))) for case in CASES
        }
        assert all(Path(p).is_file() for p in _ledgers(tmp_path, "out").values())
    finally:
        claim.release()


def test_two_concurrent_runs_on_one_file_both_judge_their_own_ledgers(tmp_path: Path) -> None:
    """The issue's reproduction: two certify runs started together on one --db file."""
    db = tmp_path / "shared.sqlite"
    first, second = _certify(tmp_path, db, "a"), _certify(tmp_path, db, "b")
    for proc in (first, second):
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stdout + stderr
    a, b = _ledgers(tmp_path, "a"), _ledgers(tmp_path, "b")
    assert set(a) == set(b) == set(CASES)
    # the same names only if the runs did not overlap; otherwise none shared
    assert a == b or not set(a.values()) & set(b.values())


def test_the_names_come_back_once_the_run_that_held_them_is_gone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    first = _db.claim_sqlite(url)
    second = _db.claim_sqlite(url)  # a second hold, even in one process, is another run
    assert (first.stem, second.stem) == (tmp_path / "x.db", tmp_path / "x.run2.db")
    assert first.note() is None
    note = second.note()
    assert note is not None
    assert "x.run2-<case>.db" in note
    first.release()
    third = _db.claim_sqlite(url)
    assert third.stem == tmp_path / "x.db"
    second.release()
    third.release()


def _slug(case_id: str) -> str:
    from harness.engine.plan.schedule import CaseSpec

    return CaseSpec.parse(case_id).slug
