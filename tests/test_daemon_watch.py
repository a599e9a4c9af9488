"""The daemon settle decision on hand-made readings (``harness.engine.process._daemon_watch``): the
quiet
window and the deadline count from the worker's first sign of life, and a deadline is
decided on evidence read after it. No process runs; the clock is the readings' own."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.engine.process._cpu_wait import CpuSample, CpuWatch
from harness.engine.process._daemon_watch import (
    DaemonWatch,
    Deadline,
    Reading,
    Settled,
    TraceSince,
    trace_since,
)
from harness.engine.process.settle import Settle

SETTLE = Settle(probe="tests._daemon:pending", deadline_s=5.0, interval_s=0.5, quiet_s=2.0)


class FakeCpu(CpuWatch):
    """A worker's CPU wait on the readings' clock: from ``starved_from`` on, it waits for
    CPU ``rate`` of every second."""

    def __init__(self, rate: float = 0.0, starved_from: float = 0.0) -> None:
        super().__init__("w1", None, 0.0)
        self.now = 0.0
        self.rate = rate
        self.starved_from = starved_from

    def mark(self) -> CpuSample:
        waited = self.rate * max(0.0, self.now - self.starved_from)
        return CpuSample("fake", self.now, waited, 0.0)


def _watch(startup_s: float = 60.0, cpu: FakeCpu | None = None) -> DaemonWatch:
    return DaemonWatch(SETTLE, spawned_at=0.0, startup_s=startup_s, cpu=cpu or FakeCpu())


def _r(
    at: float,
    *,
    done: bool = True,
    output: str = "queued=0",
    delivered: bool = False,
    own: int = 0,
    requests: int = 0,
    busy: int = 100,
) -> Reading:
    return Reading(at, done, output, delivered, own, requests, busy)


def _reader(readings: list[Reading], watch: DaemonWatch) -> Callable[[], Reading]:
    """Hands out ``readings`` in turn, moving the fake CPU clock to each one's time."""
    it: Iterator[Reading] = iter(readings)
    cpu = watch.cpu
    assert isinstance(cpu, FakeCpu)

    def read() -> Reading:
        r = next(it)
        cpu.now = r.at
        return r

    return read


def test_no_quiet_settling_before_the_first_sign_of_life() -> None:
    """A worker that imports for 9 s (quiet_s is 2) while its probe says "nothing pending":
    not settled, however long nothing happens, until it has shown a sign of life."""
    watch = _watch()
    read = _reader([_r(t) for t in (0.5, 3.0, 6.0, 9.0)], watch)
    assert [watch.poll(read) for _ in range(4)] == [None] * 4
    assert watch.alive_at is None  # so no deadline is running either


def test_the_quiet_window_and_the_deadline_count_from_the_first_boundary_hit() -> None:
    watch = _watch()
    read = _reader(
        [
            _r(9.0, own=1, busy=150),  # its first trace line: alive at 9
            _r(10.5, own=1, busy=150),  # 1.5 s quiet: not yet
            _r(11.0, own=1, busy=150),  # 2 s quiet
        ],
        watch,
    )
    assert watch.poll(read) is None
    assert watch.alive_at == 9.0
    assert watch.poll(read) is None
    decision = watch.poll(read)
    assert isinstance(decision, Settled), decision
    assert decision.by == "nothing happened for 2s"


def test_an_idle_loop_settles_on_quiet_and_a_busy_one_does_not() -> None:
    """A daemon whose scheduler polls an empty queue every second writes a trace line each
    time (its own lines grow), none of them busy: it settles on quiet. The same lines,
    busy (each commit changed a row), keep it from settling: red if every line counted, red
    if none did."""
    lines = [(9.0 + 0.5 * i, 1 + i) for i in range(6)]  # a line every 0.5 s from 9 s
    idle = _watch()
    read = _reader([_r(t, own=n, busy=150) for t, n in lines], idle)
    decisions = [idle.poll(read) for _ in lines]
    assert decisions[:4] == [None] * 4
    assert isinstance(decisions[4], Settled)
    assert decisions[4].by == "nothing happened for 2s"
    busy = _watch()
    read = _reader([_r(t, own=n, busy=150 + n) for t, n in lines], busy)
    assert [busy.poll(read) for _ in lines] == [None] * 6


def test_the_trace_read_counts_an_idle_poll_as_a_sign_of_life_and_not_as_busy(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    before = '{"event": "hit", "worker": "w1", "boundary": "x", "hit": 1}\n'
    lines = [
        {
            "event": "hit",
            "worker": "w1",
            "boundary": "after_commit.a.1",
            "hit": 1,
            "t": 5.0,
            "detail": {"target": "sqlite:///d", "changed": False},
        },
        {
            "event": "unnamed_point",
            "worker": "w1",
            "t": 6.0,
            "detail": {"kind": "after_commit", "target": "sqlite:///d", "changed": False},
        },
        {
            "event": "hit",
            "worker": "w1",
            "boundary": "after_commit.a.2",
            "hit": 1,
            "t": 7.0,
            "detail": {"target": "sqlite:///d"},
        },
        {"event": "spawn", "worker": "w1", "t": 8.0},
        {"event": "hit", "worker": "w2", "boundary": "after_send.b.3", "hit": 1, "t": 9.0},
    ]
    trace.write_text(before + "".join(json.dumps(ev) + "\n" for ev in lines) + '{"torn')
    since = trace_since(trace, len(before), "w1")
    assert since == TraceSince(own_lines=3, first_t=5.0, busy_lines=3)
    assert trace_since(tmp_path / "none.jsonl", 0, "w1") == TraceSince(0, None, 0)


def test_a_changed_probe_answer_or_a_provider_request_is_a_sign_of_life() -> None:
    for later in (_r(4.0, output="queued=2"), _r(4.0, requests=1)):
        watch = _watch()
        read = _reader([_r(0.5), later], watch)
        watch.poll(read)
        watch.poll(read)
        assert watch.alive_at == 4.0, later


def test_a_deadline_met_as_the_work_finishes_is_decided_on_a_reading_after_it() -> None:
    """At the deadline the probe had said "pending"; read again, the probe says done and the
    provider has accepted everything: settled, and it says it read again."""
    watch = _watch()
    read = _reader(
        [
            _r(1.0, done=False, own=1),
            _r(6.5, done=False, own=2, busy=120),  # past 1 + 5: the deadline
            _r(6.6, done=True, delivered=True, own=3, busy=140),  # read again after it
        ],
        watch,
    )
    assert watch.poll(read) is None
    decision = watch.poll(read)
    assert isinstance(decision, Settled), decision
    assert decision.by.endswith("read again at the deadline")
    assert decision.reading.at == 6.6


def test_a_deadline_still_pending_on_the_fresh_reading_is_missed() -> None:
    watch = _watch()
    read = _reader(
        [_r(1.0, done=False, own=1), _r(6.5, done=False, own=1), _r(6.6, done=False)], watch
    )
    watch.poll(read)
    decision = watch.poll(read)
    assert isinstance(decision, Deadline), decision
    assert decision.never_started is False


def test_a_restarted_worker_with_nothing_to_do_counts_as_started_after_its_allowance() -> None:
    """No sign of life ever (nothing left for it): after its 3 s allowance it counts as
    started, and the quiet window runs from there."""
    watch = _watch(3.0)
    read = _reader([_r(1.0), _r(3.0), _r(5.0)], watch)
    assert watch.poll(read) is None
    assert watch.poll(read) is None
    assert watch.alive_by is not None
    assert watch.alive_by.startswith("no sign of life")
    decision = watch.poll(read)
    assert isinstance(decision, Settled), decision


def test_a_deadline_is_stretched_by_the_time_the_worker_waited_for_cpu() -> None:
    """Alive at 1, waiting for CPU half of every second from then: at 6 it has had 2.5 s of
    its 5 s deadline, so the harness waits on; at 11 it has had 5 s: the deadline passed,
    and the worker was not starved (it had its due)."""
    watch = _watch(cpu=FakeCpu(rate=0.5, starved_from=1.0))
    pending = {"done": False, "own": 1}
    read = _reader([_r(1.0, **pending), _r(6.0, **pending), _r(11.0, **pending),
                    _r(11.1, **pending)], watch)  # fmt: skip
    assert watch.poll(read) is None
    assert watch.poll(read) is None
    decision = watch.poll(read)
    assert isinstance(decision, Deadline), decision
    assert decision.cpu.starved is False
    assert decision.cpu.had_s >= 5.0


def test_a_deadline_the_stretch_cuts_short_was_missed_by_the_machine() -> None:
    """Waiting for CPU 90 % of every second: at three times the deadline (15 s after its
    first sign of life) it has had 1.5 s of its 5: starved, with the figures."""
    watch = _watch(cpu=FakeCpu(rate=0.9, starved_from=1.0))
    pending = {"done": False, "own": 1}
    read = _reader([_r(1.0, **pending), _r(10.0, **pending), _r(16.0, **pending),
                    _r(16.1, **pending)], watch)  # fmt: skip
    assert watch.poll(read) is None
    assert watch.poll(read) is None
    decision = watch.poll(read)
    assert isinstance(decision, Deadline), decision
    assert decision.cpu.starved is True
    assert round(decision.cpu.had_s, 3) == 1.5


def test_a_start_the_machine_starves_is_waited_for_then_is_a_deadline_it_missed() -> None:
    """No sign of life and waiting for CPU nearly all the time: past its 3 s allowance it is
    waited for (it has not had 3 s), and at three times the allowance it is a deadline the
    machine missed (never_started)."""
    watch = _watch(3.0, cpu=FakeCpu(rate=0.95))
    read = _reader([_r(3.0), _r(6.0), _r(9.0)], watch)
    assert watch.poll(read) is None
    assert watch.poll(read) is None
    assert watch.alive_at is None
    decision = watch.poll(read)
    assert isinstance(decision, Deadline), decision
    assert decision.never_started is True
    assert decision.cpu.starved is True
