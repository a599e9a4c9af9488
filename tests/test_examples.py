"""The examples, certified: the asyncio worker's buggy variant is caught and its fix passes,
and the outbox worker, copied into an empty directory with a fresh virtualenv, fails its
pytest run with a readable ``exactly_once_effect`` message and a replay command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine.case.campaign import (
    Campaign,
    CampaignSettings,
    CaseResult,
    CaseSpec,
    run_campaign,
)
from harness.engine.search.sweep import sweep
from harness.errors import ExitStatus
from harness.invariants import Status
from harness.systems import System, resolve
from harness.usersystem import not_judged
from tests._fresh_venv import FreshVenv

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BUGGY = "examples.asyncio_worker.buggy:SYSTEM"
FIXED = "examples.asyncio_worker.fixed:SYSTEM"


def _run(
    system: str, cases: list[str] | None, db_url: str | None, tmp_path: Path
) -> list[CaseResult]:
    settings = CampaignSettings(
        system=resolve(system),
        seed=3,
        db_url=db_url,
        cases=[CaseSpec.parse(c) for c in cases] if cases is not None else None,
        workdir=tmp_path,
    )
    return run_campaign(settings).cases


def test_buggy_asyncio_worker_drops_tasks_and_liveness_fires(
    db_url: str | None, tmp_path: Path
) -> None:
    """Fire-and-forget tasks vanish in a collection; the watchdog flags it; liveness fails."""
    (case,) = _run(BUGGY, ["task_never_started"], db_url, tmp_path)
    assert case.verdict is Status.FAIL
    assert case.invariants["liveness"].status is Status.FAIL, case.invariants["liveness"]
    failed = {n for n, c in case.invariants.items() if c.status is Status.FAIL}
    assert failed == {"liveness"}
    assert case.accepted == case.intended  # a fresh worker finished the job afterwards


def test_fixed_asyncio_worker_keeps_its_tasks(db_url: str | None, tmp_path: Path) -> None:
    """Held tasks survive the same collection: every invariant holds."""
    (case,) = _run(FIXED, ["task_never_started"], db_url, tmp_path)
    assert case.verdict is Status.PASS, {
        n: c.summary for n, c in case.invariants.items() if c.status is not Status.PASS
    }
    assert len(case.workers) == 1  # nothing went overdue, nobody was replaced


def test_fixed_asyncio_worker_certifies_at_every_boundary(tmp_path: Path) -> None:
    """Baseline plus a crash at the first hit of each declared boundary and at the
    provider's far-side point: all pass, all hit."""
    cases = _run(FIXED, None, None, tmp_path)
    assert [c.verdict for c in cases] == [Status.PASS] * len(cases)
    crashed = {c.spec.boundary for c in cases if c.crash_fired}
    assert crashed == {*resolve(FIXED).boundaries, "accepted.payments"}


# The buggy system's same command line is run, and its output checked, as a doc block
# (examples/asyncio_worker/README.md, tests/test_doc_commands.py): only the fixed one here.
@pytest.mark.parametrize(("system", "status"), [(FIXED, 0)])
def test_examples_run_through_the_import_path_route(
    system: str, status: int, tmp_path: Path
) -> None:
    """``--system examples.asyncio_worker.{buggy,fixed}:SYSTEM`` from the command line."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify", "--system", system, "--seed", "3"),
            *("--case", "task_never_started", "--report-dir", str(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == ExitStatus(status), proc.stdout + proc.stderr
    if status:
        assert "FAIL task_never_started" in proc.stdout
        assert "liveness" in proc.stdout
        assert f"replay: crash-harness certify --system {system}" in proc.stdout


def _outbox(module: str) -> System:
    sys.path.insert(0, str(EXAMPLES / "outbox"))
    try:
        system = resolve(f"{module}:SYSTEM")
    finally:
        sys.path.remove(str(EXAMPLES / "outbox"))
    return system


@pytest.mark.parametrize(
    ("module", "expected"), [("outbox_worker", "exactly_once_effect"), ("outbox_fixed", None)]
)
def test_outbox_examples_under_a_sweep(module: str, expected: str | None, tmp_path: Path) -> None:
    """Against a provider that dedupes nothing, the plain outbox sends twice after a crash;
    the fixed one (attempted first, lookup before resend) never does."""
    settings = CampaignSettings(
        system=_outbox(module),
        seed=5,
        workdir=tmp_path,
        provider_window_s=0,
        provider_faults=(),
        worker_overrides={"max_attempts": 1},
    )
    with Campaign(settings) as campaign:
        cases, coverage = sweep(campaign)
    assert coverage.to_json()["pairs_covered"] == coverage.to_json()["pairs_expected"] > 0
    fired = {n for c in cases for n, r in c.invariants.items() if r.status is Status.FAIL}
    if expected is not None:
        assert expected in fired
        return
    assert fired == set()
    for case in cases:
        undecided = [r for r in case.invariants.values() if r.status is Status.UNKNOWN]
        assert all(not_judged(r) for r in undecided), [r.summary for r in undecided]


_TEST_FILE = '''\
import pytest


@pytest.mark.crash_sweep("outbox.toml")
def test_outbox_survives_crashes():
    """Crash the outbox worker at every boundary hit; count what the provider received."""
'''


def test_outbox_example_fails_in_an_empty_directory(fresh_venv: FreshVenv, tmp_path: Path) -> None:
    """A fresh venv (this checkout's wheel), the ten-line worker, a nine-line scenario,
    ``pytest``: a readable ``exactly_once_effect`` failure with its replay command."""
    venv = fresh_venv.root

    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(EXAMPLES / "outbox" / "outbox_worker.py", project)
    shutil.copy(EXAMPLES / "outbox" / "outbox.toml", project)
    (project / "test_outbox.py").write_text(_TEST_FILE)
    assert len((project / "outbox.toml").read_text().splitlines()) <= 10
    env = fresh_venv.env()
    proc = subprocess.run(
        [str(venv / "bin" / "pytest"), "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out + proc.stderr
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import harness; print(harness.__file__)"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(venv)), where  # the fresh venv's own copy ran, not ours
    assert "crash-harness: sweep of " in out
    assert "broken: exactly_once_effect" in out
    failed = "exactly_once_effect (failed): 1 destination(s) received more than one effect"
    assert failed in out, out
    assert "replay: crash-harness replay " in out
    assert "Traceback" not in out
    # a plain install runs every command: explore's search library comes with it, and the
    # report's picture needs no plotting library
    explore = subprocess.run(
        [str(venv / "bin" / "crash-harness"), "explore", "outbox.toml", "--budget", "3"],
        cwd=project,
        env={**env, "PYTHONPATH": str(project)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = explore.stdout + explore.stderr
    assert explore.returncode == ExitStatus.VIOLATION, said
    # it names what broke, not the invariants an adapter-less worker leaves unjudged
    assert "smallest failing schedule: crash@after_provider_accept#1  (exactly_once_effect" in said
    assert "internal error" not in said, said
    for heavy in ("matplotlib", "numpy"):
        probe = [str(venv / "bin" / "python"), "-c", f"import {heavy}"]
        assert subprocess.run(probe, capture_output=True, check=False).returncode != 0, heavy
    print(f"fresh venv install took {fresh_venv.install_s:.1f}s")
