"""Kept work dirs cannot pile up in the scratch tmpfs: a run that keeps one removes its own
project's kept dirs of finished runs beyond the newest few (never a live run's, and another
project's only once a week old), a run that met its expected violation keeps none, and
``clean --kept`` removes the rest, saying what it freed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.engine.store import _owner, _scratch
from harness.errors import BadInputError

ROOT = Path(__file__).resolve().parent.parent


def _gone() -> _owner.Owner:
    """An owner provably gone: this pid with another start time (a reused pid)."""
    me = _owner.me()
    return _owner.Owner(me.pid, me.start + 1, me.boot, me.host)


def _kept_dir(
    *,
    kept_at: float,
    owner: _owner.Owner | None = None,
    size: int = 0,
    project: Path | None = None,
) -> Path:
    """A kept work dir made as a run makes it, its maker ``owner`` (default: gone), kept at
    ``kept_at`` (the marker's mtime, set outright: no waiting for the clock to move) by a
    run of ``project`` (default: the one these tests run in)."""
    path = _scratch.make_workdir()
    if owner is not _owner.me():
        (path / _scratch.OWNER_FILE).write_text((owner or _gone()).tag() + "\n")
    (path / "ledger.db").write_bytes(b"x" * size)
    if project is None:
        _scratch.keep(path)
    else:
        (path / _scratch.KEPT_FILE).write_text(f"kept\nproject: {project}\n")
    os.utime(path / _scratch.KEPT_FILE, (kept_at, kept_at))
    return path


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setenv(_scratch.TMPDIR_ENV, str(root))
    monkeypatch.delenv(_scratch.KEEP_ENV, raising=False)
    return root


def test_only_the_newest_kept_dirs_stay_and_a_live_runs_is_never_touched(scratch: Path) -> None:
    limit = _scratch.DEFAULT_KEPT
    old = [_kept_dir(kept_at=1_000.0 + i) for i in range(limit + 3)]  # oldest first
    live = _kept_dir(kept_at=1.0, owner=_owner.me())  # the oldest of all, but its run lives
    unowned = scratch / f"{_scratch.PREFIX}not-ours"
    unowned.mkdir()  # no owner tag: never proven ours, never removed
    mine = _scratch.make_workdir()
    removed = _scratch.keep_and_prune(mine)
    # this run's dir plus the newest limit-1 of the old ones: limit in all
    assert sorted(r.path for r in removed) == sorted(old[: len(old) - (limit - 1)])
    assert {p for p in scratch.iterdir()} == {mine, *old[-(limit - 1) :], live, unowned}
    assert (mine / _scratch.KEPT_FILE).exists()
    assert _scratch.keep_and_prune(mine) == []  # nothing more to prune


def test_another_projects_kept_dirs_stay_until_they_are_a_week_old(
    scratch: Path, tmp_path: Path
) -> None:
    """On a shared machine, my failing runs never remove your evidence: only my project's
    dirs count against the limit; yours go once older than the stated age."""
    now = time.time()
    day = 24 * 3600.0
    theirs = tmp_path / "their-project"
    mine_old = [_kept_dir(kept_at=now - 600 + i) for i in range(3)]
    their_recent = [_kept_dir(kept_at=now - 3600 - i, project=theirs) for i in range(3)]
    their_stale = _kept_dir(kept_at=now - (_scratch.KEPT_MAX_AGE_DAYS + 1) * day, project=theirs)
    unmarked_stale = _kept_dir(kept_at=now - 30 * day, project=None)
    (unmarked_stale / _scratch.KEPT_FILE).write_text("kept: named in the run's output\n")
    os.utime(unmarked_stale / _scratch.KEPT_FILE, (now - 30 * day,) * 2)
    mine = _scratch.make_workdir()
    removed = {r.path for r in _scratch.keep_and_prune(mine, limit=2, now=now)}
    assert removed == {*mine_old[:2], their_stale, unmarked_stale}
    assert set(scratch.iterdir()) == {mine, mine_old[2], *their_recent}


def test_the_limit_comes_from_the_environment(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_scratch.KEEP_ENV, "1")
    assert _scratch.kept_limit() == 1
    old = [_kept_dir(kept_at=10.0 + i) for i in range(3)]
    mine = _scratch.make_workdir()
    assert {r.path for r in _scratch.keep_and_prune(mine)} == set(old)
    for bad in ("0", "-2", "five"):
        monkeypatch.setenv(_scratch.KEEP_ENV, bad)
        with pytest.raises(BadInputError, match=_scratch.KEEP_ENV):
            _scratch.kept_limit()


def _harness(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_failing_run_keeps_its_dir_says_where_and_prunes_older_ones(
    scratch: Path, tmp_path: Path
) -> None:
    """A real failing certify (a mutant's baseline): N+3 older kept dirs of its project
    become N-1; another project's recent ones all stay."""
    limit = 2
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    now = time.time()
    old = [_kept_dir(kept_at=now - 900 + i, project=project) for i in range(limit + 3)]
    theirs = [_kept_dir(kept_at=now - 1800 + i, project=tmp_path / "x") for i in range(limit)]
    live = _kept_dir(kept_at=1.0, owner=_owner.me())  # this test runs: untouched
    proc = _harness(
        "certify",
        "--system",
        "mutant:new_key_per_attempt",
        "--seed",
        "5",
        "--case",
        "baseline",
        "--report-dir",
        "out",
        cwd=project,
        env={_scratch.TMPDIR_ENV: str(scratch), _scratch.KEEP_ENV: str(limit)},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    kept_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("work dir kept: ")]
    assert len(kept_lines) == 1, proc.stdout
    kept = Path(kept_lines[0].removeprefix("work dir kept: "))
    assert kept.parent == scratch
    assert (kept / _scratch.KEPT_FILE).exists()
    assert f"removed {len(old) - (limit - 1)} older kept work dir(s)" in proc.stdout
    assert _scratch.KEEP_ENV in proc.stdout
    assert set(scratch.iterdir()) == {kept, *old[-(limit - 1) :], *theirs, live}


def test_a_bad_limit_is_refused_before_anything_runs(scratch: Path, tmp_path: Path) -> None:
    proc = _harness(
        "certify",
        "--case",
        "baseline",
        cwd=tmp_path,
        env={_scratch.TMPDIR_ENV: str(scratch), _scratch.KEEP_ENV: "lots"},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _scratch.KEEP_ENV in proc.stderr
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "reports").exists()


def test_a_run_whose_violation_was_expected_keeps_no_work_dir(
    scratch: Path, tmp_path: Path
) -> None:
    """Exit 0 because the violation was expected: nobody will look, nothing is kept; unless
    --keep-workdir asked, when the dir is kept and named."""
    args = ("run", "mutant-new-key-per-attempt", "--determinism", "0", "--report-dir", "out")
    env = {_scratch.TMPDIR_ENV: str(scratch)}
    proc = _harness(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "expected violation stable_idempotency_key was found" in proc.stdout
    assert "work dir kept" not in proc.stdout
    assert list(scratch.iterdir()) == []
    import json

    assert json.loads((tmp_path / "out" / "report.json").read_text())["workdir"] is None
    kept = _harness(*args, "--keep-workdir", cwd=tmp_path, env=env)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "work dir kept: " in kept.stdout
    assert len([p for p in scratch.iterdir() if (p / _scratch.KEPT_FILE).exists()]) == 1


def test_clean_kept_removes_kept_dirs_of_finished_runs_and_says_how_much(scratch: Path) -> None:
    from harness.cli import main

    gone = [
        _kept_dir(kept_at=10.0 + i, size=1 << 20) for i in range(3)
    ]  # the markers add bytes, not a tenth of a MB
    live = _kept_dir(kept_at=1.0, owner=_owner.me(), size=10)
    runner = CliRunner()
    first = runner.invoke(main, ["clean"])
    assert first.exit_code == 0, first.output
    assert "3 kept work dir(s) of finished runs stay" in first.output
    assert all(p.exists() for p in gone)
    result = runner.invoke(main, ["clean", "--kept"])
    assert result.exit_code == 0, result.output
    for path in gone:
        assert f"removed work dir {path} (1.0 MB)" in result.output
        assert not path.exists()
    assert "removed 3 work dir(s), 3.0 MB freed" in result.output
    assert live.exists()
