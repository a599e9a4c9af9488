"""The Celery example, swept through the command route as a daemon on a real Redis: the
verdict table of examples/celery_worker/README.md, crash point by crash point.

Celery's defaults lose the task whose pool child (or whole worker) dies after its early ack;
the fixed worker (late acks, reject on worker lost, prefetch 1) finishes everything, and
only a provider that dedupes nothing shows its at-least-once resend. Under fake time a
restart comes 3700 s later by the worker's clock, past Kombu's visibility timeout, so no
case waits for it.
"""

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
from tests._services import needs_fake_clock, needs_redis

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "examples" / "celery_worker"
REDIS_URL = "redis://127.0.0.1:6379/5"
#: this test run's own key namespace: other runs on this machine (a developer's, another CI
#: job's) share the Redis, and their keys are never this run's leftovers
NAMESPACE = f"celery-example-test-{uuid.uuid4().hex[:8]}"


pytest.importorskip("celery")
pytestmark = [
    needs_redis,
    pytest.mark.timeout(400),
    needs_fake_clock,  # every scenario loads with fake_time or beside one that does
]

#: what a sweep of each scenario finds, case by case (the README's table); a case not listed
#: passes. ``job_started`` of the defaults under worker scope races Celery's early ack against
#: the kill (the message is lost once acked, redelivered if the kill came first; it went
#: either way here, more often lost on a quiet machine): either answer is that run's truth.
EXPECTED: dict[str, dict[str, set[frozenset[str]]]] = {
    "buggy-process": {
        "crash@job_started#1": {frozenset({"no_silent_loss"})},
        "crash@job_started#2": {frozenset({"no_silent_loss"})},
    },
    "buggy-worker": {
        "crash@job_started#1": {frozenset({"no_silent_loss"}), frozenset()},
        "crash@job_started#2": {frozenset({"no_silent_loss"}), frozenset()},
    },
    "fixed-process": {},
    "fixed-worker": {},
    "fixed-no-dedupe": {
        "crash@after_provider_accept#1": {frozenset({"exactly_once_effect"})},
        "crash@after_provider_accept#2": {frozenset({"exactly_once_effect"})},
        # the same window, found with no boundary(): the provider held the reply, the
        # worker tree was killed (#25's far-side point)
        "crash@accepted.payments#1": {frozenset({"exactly_once_effect"})},
        "crash@accepted.payments#2": {frozenset({"exactly_once_effect"})},
    },
}


def _keys() -> set[bytes]:
    from redis import Redis

    return set(Redis.from_url(REDIS_URL).scan_iter(match=f"{NAMESPACE}:*"))


def _sweep(tmp_path: Path, name: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "report"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "sweep", str(SCENARIOS / f"{name}.toml")),
            *("--report-dir", str(out), "--determinism", "0", "--jobs", "2"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=380,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "CRASH_HARNESS_TMPDIR": str(tmp_path),
            "CELERY_EXAMPLE_NAMESPACE": NAMESPACE,
        },
        check=False,
    )
    report = json.loads((out / "report.json").read_text())
    return done.returncode, report, done.stdout + done.stderr


#: the sweeps CI runs every time: one that loses work and one that holds, under the two crash
#: scopes; the other three (about 80 s of a 2-core runner) run with --run-slow
IN_CI = ("buggy-worker", "fixed-process")


@pytest.mark.parametrize(
    "name",
    [n if n in IN_CI else pytest.param(n, marks=pytest.mark.slow) for n in EXPECTED],
)
def test_each_crash_point_gives_its_documented_verdict(tmp_path: Path, name: str) -> None:
    before = _keys()
    code, report, output = _sweep(tmp_path, name)
    expected = EXPECTED[name]
    # the dry run, 3 boundaries x 2 hits, and the 2 requests the provider accepted in the
    # dry run as far-side points (crash@accepted.payments#1, #2)
    assert len(report["cases"]) == 9, output
    failed_somewhere = False
    hangs = 0
    for case in report["cases"]:
        failed = frozenset(n for n, r in case["invariants"].items() if r["status"] == "fail")
        allowed = expected.get(case["id"], {frozenset()})
        assert failed in allowed, (case["id"], failed, output)
        assert case["verdict"] == ("fail" if failed else "pass"), (case["id"], output)
        failed_somewhere |= bool(failed)
        # a daemon: every case ends with the harness stopping the worker by SIGTERM, and
        # nobody waited for Kombu's one-hour visibility timeout
        last = case["workers"][-1]
        assert last["outcome"] == "stopped", (case["id"], case["workers"])
        # a warm shutdown (exit 0), or SIGTERM's default end for a worker stopped before
        # Celery installed its handler (all was delivered before it started); never SIGKILL,
        # but for Celery's own hang, below
        ended = (last["exit_code"], last["signal"])
        if ended not in ((0, None), (None, "SIGTERM")):
            assert _hung_joining_its_pool(last), last
            hangs += 1
    # Celery's warm shutdown can hang joining a pool child after one was SIGKILLed (the
    # process-scope crash kills a pool child; billiard#457 is one known way: a child killed
    # holding the pool queue's lock). The harness then does what it documents: its stacks
    # (SIGABRT), SIGKILL, the case still judged. Seen once in CI (fixed-process,
    # after_provider_accept#2, 30 s grace); allowed for one case, with that stack only.
    assert hangs <= 1, output
    assert code == (ExitStatus.VIOLATION if failed_somewhere else ExitStatus.PASSED), output
    # the teardown hook deleted every key the sweep's cases made
    assert _keys() <= before


def _hung_joining_its_pool(worker: dict[str, Any]) -> bool:
    """Whether a worker the harness had to force was Celery's main process waiting, in its
    warm shutdown, for a pool child that never ended (its stack dump says so), stopped by
    the harness's documented escalation (SIGTERM, then SIGABRT for the stacks, SIGKILL)."""
    dump = worker.get("stack_dump") or ""
    return (
        worker["signal"] == "SIGABRT"
        and "SIGTERM, then SIGABRT" in (worker.get("note") or "")
        and "billiard/pool.py" in dump
        and " in join" in dump
        and "in on_stop" in dump
    )
