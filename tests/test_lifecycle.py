"""Daemon workers, expected exits, per-case teardown and fake time (``[worker]`` lifecycle keys).

A worker that never exits on its own (``tests._daemon``, shaped like a Celery worker) must
end its case once the system has settled, be stopped by its documented signal (SIGKILL only
when it ignores that), and be judged like any other: a correct one passes, one that marks a
job done before posting it is caught losing it. Each test runs the real CLI on a scenario
file, with real processes and a real SQLite file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ExitStatus
from tests._daemon import starving_cpu
from tests._services import needs_fake_clock

ROOT = Path(__file__).resolve().parent.parent


SCENARIO = """
[scenario]
name = "daemon-{mode}"
system = "cmd:python -m tests._daemon {mode}"
boundaries = ["job_started", "after_provider_accept"]
prepare = "tests._daemon:prepare"
seed = 3

[workload]
runs = 1
destinations_per_topic = 1

[provider]
faults = []

[worker]
daemon = true
stop_grace_s = {grace}
{worker}

[cases]
mode = "list"
list = {cases}
crash_scope = "{scope}"

[settle]
probe = "{probe}"
teardown = "tests._daemon:teardown"
deadline_s = {deadline}
interval_s = 0.2
quiet_s = 1
"""


def _sweep(
    tmp_path: Path,
    mode: str,
    cases: list[str],
    *,
    scope: str = "worker",
    worker: str = "",
    deadline: float = 10,
    probe: str = "tests._daemon:pending",
    env: dict[str, str] | None = None,
    grace: float = 30,
) -> tuple[int, dict[str, Any], str]:
    """``grace``: the stop grace; long by default, so a loaded machine that runs a stopping
    worker late never turns its clean exit into a kill (only the test of that kill shortens it)."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / f"{mode}.toml"
    path.write_text(
        SCENARIO.format(
            mode=mode,
            cases=json.dumps(cases),
            scope=scope,
            worker=worker,
            deadline=deadline,
            probe=probe,
            grace=grace,
        )
    )
    (tmp_path / "gate").mkdir(exist_ok=True)
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(path), "--report-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "CRASH_HARNESS_TMPDIR": str(tmp_path),
            "CH_TEST_TEARDOWN_LOG": str(tmp_path / "teardowns"),
            "CH_TEST_GATE_DIR": str(tmp_path / "gate"),
            "NO_COLOR": "1",
            **(env or {}),
        },
        check=False,
    )
    report_path = out / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return done.returncode, report, done.stdout + done.stderr


def _case(report: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(c for c in report["cases"] if c["id"] == case_id)


def _failed(case: dict[str, Any]) -> set[str]:
    return {n for n, r in case["invariants"].items() if r["status"] == "fail"}


def test_a_correct_daemon_settles_is_stopped_by_its_signal_and_passes(tmp_path: Path) -> None:
    cases = ["baseline", "crash@job_started#1", "crash@after_provider_accept#1"]
    code, report, said = _sweep(tmp_path, "correct", cases)
    assert code == ExitStatus.PASSED, said
    assert [c["verdict"] for c in report["cases"]] == ["pass"] * 3, said
    for case in report["cases"]:
        last = case["workers"][-1]
        assert last["outcome"] == "stopped", case["workers"]
        assert last["exit_code"] == 0, last
        assert last["stack_dump"] is None, last
        assert (
            "stopped by SIGTERM (settled: the provider accepted every intended delivery"
            in (last["note"])
        ), last
    crashed = _case(report, "crash@job_started#1")["workers"]
    assert [w["outcome"] for w in crashed] == ["crashed_as_planned", "stopped"], crashed
    # the teardown ran once per case run (the determinism check reruns some), never twice
    torn = (tmp_path / "teardowns").read_text().splitlines()
    assert len(torn) == len(set(torn)), torn
    assert {Path(line.split("|")[0]).parent.name for line in torn} == {
        "baseline",
        "crash_job_started_1",
        "crash_after_provider_accept_1",
    }, torn


def test_a_daemon_that_marks_a_job_done_before_posting_is_caught_losing_it(
    tmp_path: Path,
) -> None:
    code, report, said = _sweep(tmp_path, "marks-first", ["baseline", "crash@job_started#1"])
    assert code == ExitStatus.VIOLATION, said
    assert _case(report, "baseline")["verdict"] == "pass", said
    lost = _case(report, "crash@job_started#1")
    assert lost["verdict"] == "fail"
    assert _failed(lost) == {"no_silent_loss"}, lost["invariants"]
    # nothing pending by its own account and nothing happening: settled by quiet
    assert "settled: nothing happened for 1s" in lost["workers"][-1]["note"], lost["workers"]
    assert "invariants violated: no_silent_loss" in said


def test_a_daemon_that_ignores_its_stop_signal_is_killed_after_the_grace(tmp_path: Path) -> None:
    code, report, said = _sweep(tmp_path, "ignores-term", ["baseline"], grace=2)
    assert code == ExitStatus.PASSED, said
    worker = report["cases"][0]["workers"][-1]
    assert worker["outcome"] == "stopped"
    # faulthandler's SIGABRT ends it, or the SIGKILL after it does
    assert worker["signal"] in ("SIGABRT", "SIGKILL"), worker
    assert "SIGTERM, then SIGABRT (its stacks) and SIGKILL after 2s" in worker["note"], worker
    # where it was when it outlived the grace: its main loop's sleep, in its own file
    assert worker["stack_dump"] is not None, worker
    assert "_daemon.py" in worker["stack_dump"], worker
    assert "in main" in worker["stack_dump"], worker


def test_an_exit_after_a_pool_child_crash_is_an_anomaly_unless_the_scenario_expects_it(
    tmp_path: Path,
) -> None:
    """Process scope kills the pool child; the parent exits 1. Unexpected, that is an unknown
    case that names no invariant; with ``exits_after_crash = [1]`` it is restarted, and the
    work is finished and judged."""
    code, report, said = _sweep(tmp_path, "pool", ["crash@job_started#1"], scope="process")
    assert code == ExitStatus.INCONCLUSIVE, said
    case = report["cases"][0]
    assert case["verdict"] == "unknown", said
    assert _failed(case) == set(), case["invariants"]
    assert "invariants violated" not in said
    assert [w["outcome"] for w in case["workers"]] == ["died"], case["workers"]

    code, report, said = _sweep(
        tmp_path / "expected",
        "pool",
        ["crash@job_started#1", "crash@after_provider_accept#1"],
        scope="process",
        worker="exits_after_crash = [1]",
    )
    assert code == ExitStatus.PASSED, said
    for case in report["cases"]:
        outcomes = [w["outcome"] for w in case["workers"]]
        assert outcomes == ["exited_after_crash", "stopped"], case["workers"]
        assert "normal by the scenario's exits_after_crash" in case["workers"][0]["note"]


@needs_fake_clock
def test_fake_time_moves_a_visibility_timeout_that_wall_time_would_make_us_wait_for(
    tmp_path: Path,
) -> None:
    """A job claimed by a killed worker is visible again only after 600 s of its wall clock.
    With ``fake_time`` the restart gap moves that clock and the restart finishes the job in
    seconds; without it the job is still pending at the settle deadline (liveness)."""
    case_id = "crash@job_started#1"
    code, report, said = _sweep(
        tmp_path, "visibility", [case_id], worker="fake_time = true\nrestart_gap_s = 700"
    )
    assert code == ExitStatus.PASSED, said
    assert report["cases"][0]["verdict"] == "pass", said

    code, report, said = _sweep(
        tmp_path / "wall", "visibility", [case_id], worker="restart_gap_s = 700", deadline=3
    )
    assert code == ExitStatus.VIOLATION, said
    case = report["cases"][0]
    # late, not lost: the system still holds the job (its probe says so), so liveness fails
    # and no_silent_loss, which needs the work finished, is left undecided
    assert _failed(case) == {"liveness"}, case["invariants"]
    loss = case["invariants"]["no_silent_loss"]
    assert loss["status"] == "unknown", loss
    assert "still pending at the settle deadline (undone=1)" in loss["summary"], loss
    assert any("still pending at the settle deadline" in n for n in case["notes"]), case["notes"]


def test_a_parent_killed_under_a_child_at_work_leaves_the_child_to_finish(tmp_path: Path) -> None:
    """``crash_scope = "parent"``: the pool child reaches the boundary and the worker's first
    process dies under it. The orphan posts and records the job itself; the restarted worker
    finds nothing left to do."""
    code, report, said = _sweep(tmp_path, "pool", ["crash@job_started#1"], scope="parent")
    assert code == ExitStatus.PASSED, said
    (case,) = report["cases"]
    assert case["verdict"] == "pass", said
    first = case["workers"][0]
    assert first["outcome"] == "crashed_as_planned", case["workers"]
    assert first["stragglers"] == 0, first  # the orphan ended on its own, not killed
    # the orphaned child went on past the crash point and delivered, so no later worker
    # started the job again (a child killed with its parent would have left it to one)
    assert case["boundaries_reached"] == {
        "job_started": 1,
        "after_provider_accept": 1,
        "accepted.payments": 1,  # the provider's far side of the same send
    }, case
    assert (case["effects"]["intended"], case["effects"]["accepted"]) == (1, 1)


def test_a_daemon_crash_whose_hit_never_comes_is_a_gap_that_says_so(tmp_path: Path) -> None:
    """One delivery, so ``job_started#2`` never comes: the daemon settles and is stopped
    with its arm unused. That is a planned crash that did not happen: never a pass."""
    code, report, said = _sweep(tmp_path, "correct", ["crash@job_started#2"])
    assert code == ExitStatus.VIOLATION, said  # a coverage gap fails the run
    (case,) = report["cases"]
    assert case["verdict"] == "gap", said
    assert case["crash_fired"] is False
    (landing,) = case["landings"]
    assert landing["landing"] == "not_reached", landing
    assert "reached job_started 1 time(s)" in landing["detail"], landing


def test_a_daemon_slower_to_start_than_its_quiet_window_is_not_stopped_before_it_works(
    tmp_path: Path,
) -> None:
    """It takes 3 s to start (quiet_s is 1) and only then enqueues its work; until then its
    probe says "nothing pending". The quiet window counts from its first sign of life, so it
    is not stopped before it has worked, and its baseline passes (counted from the spawn, it
    was stopped at once and failed no_silent_loss)."""
    code, report, said = _sweep(tmp_path, "slow-start", ["baseline"], probe="tests._daemon:queued")
    assert code == ExitStatus.PASSED, said
    (case,) = report["cases"]
    assert case["verdict"] == "pass", said
    assert (case["effects"]["intended"], case["effects"]["accepted"]) == (1, 1), case["effects"]
    assert "the provider accepted every intended delivery" in case["workers"][-1]["note"]


def test_a_deadline_met_just_as_the_work_finishes_is_decided_on_fresh_evidence(
    tmp_path: Path,
) -> None:
    """The worker's one send waits at a gate its probe opens on a look that comes after the
    settle deadline (0.05 s after its first sign of life); that probe answers "pending", as
    read before the send, and the send is accepted before the harness decides. Read again
    after the deadline, everything is delivered and the probe says so: settled, not a
    liveness failure."""
    code, report, said = _sweep(
        tmp_path, "gated", ["baseline"], probe="tests._daemon:gated", deadline=0.05
    )
    assert code == ExitStatus.PASSED, said
    (case,) = report["cases"]
    assert case["verdict"] == "pass", said
    assert case["invariants"]["liveness"]["status"] != "fail", case["invariants"]["liveness"]
    note = case["workers"][-1]["note"]
    assert "every intended delivery, read again at the deadline" in note, note


@contextlib.contextmanager
def _cpu_hog() -> Iterator[None]:
    """A busy process at normal priority on the CPU the ``spin``/``stall`` worker moves to
    at the lowest priority: a runnable worker there gets almost none of it."""
    cpu = starving_cpu()
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


STARVED = "undecided: the machine starved the worker"


# the walk mode's copy (30 s of CPU hog) runs with --run-slow; the verdict path it checks is
# the same, and the walk mode's own process handling is tested in test_process_tree.py
@pytest.mark.parametrize("tree", ["default", pytest.param("walk", marks=pytest.mark.slow)])
def test_a_worker_the_machine_starved_past_its_deadline_is_undecided_not_failed(
    tmp_path: Path, tree: str
) -> None:
    """Once started, the worker needs CPU it is not given (a hog beside it at a higher
    priority), so even with its 2 s settle deadline stretched to 6 s to give back the time
    it waited for CPU, it has not had its 2 s. That is the machine,
    not the system: the case is unknown (exit 3), the figures it was decided from are in
    the report, and no invariant fails. Measured from its cgroup where there is one, from
    its threads' scheduler statistics in walk mode."""
    env = {"CRASH_HARNESS_TREE": "walk"} if tree == "walk" else {}
    with _cpu_hog():
        code, report, said = _sweep(tmp_path, "spin", ["baseline"], deadline=2, env=env)
    assert code == ExitStatus.INCONCLUSIVE, said
    (case,) = report["cases"]
    assert case["verdict"] == "unknown", said
    assert _failed(case) == set(), case["invariants"]
    liveness = case["invariants"]["liveness"]
    assert liveness["status"] == "unknown", liveness
    assert liveness["summary"].startswith(STARVED), liveness
    (cpu,) = liveness["evidence"]["starved"]
    assert cpu["starved"] is True, cpu
    assert cpu["had_s"] < cpu["required_s"] == 2, cpu  # short of its due, stretched 3 times
    assert cpu["window_s"] >= cpu["stretch"] * cpu["required_s"], cpu
    assert cpu["waited_for_cpu_s"] > 0, cpu
    assert f"note: {STARVED}: w1 waited" in said  # on the console too
    note = next(n for n in case["notes"] if n.startswith(STARVED))
    assert "for CPU in a" in note, note
    assert "of the 2s it was due" in note, note
    assert note in (tmp_path / "report" / "report.md").read_text()


def test_a_stalled_worker_beside_the_same_hog_is_still_a_liveness_failure(tmp_path: Path) -> None:
    """The same worker and the same hog, but it blocks for good instead of computing: asleep,
    it waits for no CPU, so the machine is no excuse and the missed deadline fails
    liveness."""
    with _cpu_hog():
        code, report, said = _sweep(tmp_path, "stall", ["baseline"], deadline=2)
    assert code == ExitStatus.VIOLATION, said
    (case,) = report["cases"]
    assert _failed(case) == {"liveness"}, case["invariants"]
    (problem,) = case["invariants"]["liveness"]["evidence"]["problems"]
    assert problem["cpu"]["starved"] is False, problem


@pytest.mark.parametrize("mode", ["correct", "ignores-term"])
def test_a_deploy_tells_a_graceful_worker_from_one_that_ignores_its_stop_signal(
    tmp_path: Path, mode: str
) -> None:
    """``deploy``: SIGTERM reaches the worker held right after the provider accepted its
    send; one that ends on it is gone at once, one that ignores it is killed when the grace
    is over, with its stacks. Both keyed their send, so the next version (the same worker)
    finishes without a duplicate either way: the difference is in how each one ended."""
    code, report, said = _sweep(
        tmp_path, mode, ["deploy@after_provider_accept#1"], deadline=30, grace=2
    )
    assert code == ExitStatus.PASSED, said
    (case,) = report["cases"]
    (landing,) = case["landings"]
    assert landing["landing"] == "landed", landing
    first = case["workers"][0]
    assert first["outcome"] == "stopped", case["workers"]
    if mode == "correct":
        assert (first["exit_code"], first["stack_dump"]) == (0, None), first
        assert "stopped by SIGTERM (deploy at after_provider_accept#1" in landing["detail"]
    else:
        assert "SIGTERM, then SIGABRT (its stacks) and SIGKILL after 2s" in landing["detail"]
        assert "_daemon.py" in (first["stack_dump"] or ""), first
    assert "the same version starts again" in landing["detail"], landing
    assert len(case["workers"]) >= 2, case["workers"]  # the next worker took over
