"""A daemon's planned crash and its stop can overlap: a pool child traces its crash and
starts killing the worker's tree, and before the kill reaches the main process the harness
sees the system settled and sends the stop signal. The worker then dies by the crash's
SIGKILL. Read as "stopped", the case would lose its crash (no restart after it, and the
timeline would show a stop where a crash was); CI saw it once in the Celery example
(``crash@after_provider_accept#2`` under worker scope: a ``stopped`` worker ended by SIGKILL
0.03 s after its SIGTERM). The classification puts the crash first."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from harness.engine.process._boundary import Arm
from harness.engine.process._classify import classify
from harness.engine.process._outcome import OutcomeKind
from harness.engine.process._running import RunningWorker
from harness.engine.store.trace import TraceEvent

KILLED = signal.SIGKILL  # a wait status for a death by signal is the signal number


def _worker(tmp_path: Path, stopped_by: str) -> RunningWorker:
    (tmp_path / "w1.stderr").write_text("")
    worker = RunningWorker(
        "w1", 4242, time.time(), tmp_path / "w1.stderr", [Arm("after_provider_accept", 2)]
    )
    worker.stopped_by = stopped_by
    return worker


def _crash_line(worker: str) -> TraceEvent:
    return TraceEvent(
        t=time.time(),
        event="crash",
        worker=worker,
        pid=4243,
        boundary="after_provider_accept",
        hit=2,
    )


def test_a_crash_under_way_when_the_stop_was_sent_is_the_crash(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "SIGTERM")
    outcome = classify(worker, KILLED, [_crash_line("w1")], time.time(), None)
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED, outcome
    assert (outcome.boundary, outcome.hit) == ("after_provider_accept", 2)


def test_a_sigkill_after_a_stop_with_no_crash_line_stays_a_stop(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "SIGTERM")
    outcome = classify(worker, KILLED, [_crash_line("w2")], time.time(), None)
    assert outcome.kind is OutcomeKind.STOPPED, outcome


def test_the_stops_own_sigkill_after_its_grace_stays_a_stop(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "SIGTERM, then SIGABRT (its stacks) and SIGKILL after 30s")
    outcome = classify(worker, KILLED, [_crash_line("w1")], time.time(), None)
    assert outcome.kind is OutcomeKind.STOPPED, outcome
