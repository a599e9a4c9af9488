"""Boundary actions other than crash: pause (and what a release can say), hang, raise."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path

import pytest

from harness import boundary
from harness.engine.process._boundary import Arm, InjectedError, note
from harness.engine.process.supervisor import OutcomeKind, Supervisor


def _two_boundaries() -> None:
    boundary("a")
    boundary("b")


def test_pause_reports_then_continues(tmp_path: Path) -> None:
    """A paused worker says where it is, waits, and goes on when released."""
    trace = tmp_path / "t.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", _two_boundaries, trace_path=trace, arms=[Arm("b", 1, "pause")])
        paused = sup.wait_paused(w, timeout_s=30)
        assert paused is not None
        assert (paused.boundary, paused.hit) == ("b", 1)
        sup.release(w)
        assert sup.wait(w, timeout_s=30, trace_path=trace).kind is OutcomeKind.COMPLETED
    assert '"event": "resume"' in trace.read_text()


def test_release_with_crash_kills_at_the_boundary(tmp_path: Path) -> None:
    """Releasing a paused worker with 'crash' kills it right there, as a planned crash."""
    trace = tmp_path / "t.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", _two_boundaries, trace_path=trace, arms=[Arm("a", 1, "pause")])
        assert sup.wait_paused(w, timeout_s=30) is not None
        sup.release(w, "crash")
        out = sup.wait(w, timeout_s=30, trace_path=trace)
    assert out.kind is OutcomeKind.CRASHED_AS_PLANNED
    assert out.boundary == "a"


def _keeps_or_drops(*, keep: bool, marker: Path) -> None:
    class Holder:
        pass

    kept = Holder()
    cycle = Holder()
    cycle.self = cycle  # type: ignore[attr-defined]
    ref = weakref.ref(cycle)
    holder = [cycle] if keep else []
    del cycle
    gc.disable()  # only the harness's collection may run
    boundary("collect")
    marker.write_text("alive" if ref() is not None else "collected")
    del holder, kept


@pytest.mark.parametrize(("keep", "expected"), [(True, "alive"), (False, "collected")])
def test_release_with_gc_collects_unreferenced_cycles(
    tmp_path: Path,
    keep: bool,  # noqa: FBT001 - a pytest parameter, not an API flag
    expected: str,
) -> None:
    """'gc' runs a collection at the boundary: what nothing holds strongly is gone after it."""
    trace = tmp_path / "t.jsonl"
    marker = tmp_path / "marker"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start(
            "w1",
            lambda: _keeps_or_drops(keep=keep, marker=marker),
            trace_path=trace,
            arms=[Arm("collect", 1, "pause")],
        )
        assert sup.wait_paused(w, timeout_s=30) is not None
        sup.release(w, "gc")
        assert sup.wait(w, timeout_s=30, trace_path=trace).kind is OutcomeKind.COMPLETED
    assert marker.read_text() == expected


def test_hang_is_announced_and_the_worker_stays_alive(tmp_path: Path) -> None:
    """A hung worker says so on its events pipe, keeps running, and is reported hung."""
    trace = tmp_path / "t.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", _two_boundaries, trace_path=trace, arms=[Arm("a", 1, "hang")])
        event = sup.wait_event(w, timeout_s=30)
        assert event is not None
        assert (event.kind, event.subject) == ("hung", "a")
        os.kill(w.pid, 0)  # still alive
        out = sup.wait(w, timeout_s=0.3, trace_path=trace)
    assert out.kind is OutcomeKind.HUNG


def _raises_and_handles(marker: Path) -> None:
    try:
        boundary("a")
    except InjectedError as exc:
        marker.write_text(f"handled: {exc}")


def test_raise_is_an_exception_the_worker_can_handle(tmp_path: Path) -> None:
    """'raise' is deliberately not a crash: the worker's handler runs (and could hide a bug)."""
    trace = tmp_path / "t.jsonl"
    marker = tmp_path / "marker"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start(
            "w1", lambda: _raises_and_handles(marker), trace_path=trace, arms=[Arm("a", 1, "raise")]
        )
        assert sup.wait(w, timeout_s=30, trace_path=trace).kind is OutcomeKind.COMPLETED
    assert marker.read_text().startswith("handled: injected at boundary a hit 1")


def test_first_k_hits_are_armed(tmp_path: Path) -> None:
    """An arm with count=2 pauses on hits 1 and 2, not 3."""
    trace = tmp_path / "t.jsonl"

    def three() -> None:
        for _ in range(3):
            boundary("x")

    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", three, trace_path=trace, arms=[Arm("x", 1, "pause", count=2)])
        for hit in (1, 2):
            paused = sup.wait_paused(w, timeout_s=30)
            assert paused is not None
            assert paused.hit == hit
            sup.release(w)
        assert sup.wait(w, timeout_s=30, trace_path=trace).kind is OutcomeKind.COMPLETED


def test_note_reaches_the_harness(tmp_path: Path) -> None:
    """A worker-side note (the watchdog's overdue flag) arrives on the events pipe."""
    trace = tmp_path / "t.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", lambda: note("overdue_flagged", delivery_id="dlv_1"), trace_path=trace)
        event = sup.wait_event(w, timeout_s=30)
        assert event is not None
        assert (event.kind, event.subject) == ("overdue_flagged", "dlv_1")
        sup.wait(w, timeout_s=30, trace_path=trace)


def test_bad_arm_is_refused() -> None:
    """Unknown actions and hits below 1 are refused with the reason."""
    with pytest.raises(ValueError, match="unknown boundary action"):
        Arm("a", 1, "explode")
    with pytest.raises(ValueError, match=">= 1"):
        Arm("a", 0)
