"""The daemon settle decision on hand-made readings (``harness._daemon_watch``): the quiet
window and the deadline count from the worker's first sign of life, and a deadline is
decided on evidence read after it. No process runs; the clock is the readings' own."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from harness._daemon_watch import DaemonWatch, Deadline, Reading, Settled
from harness.settle import Settle

SETTLE = Settle(probe="tests._daemon:pending", deadline_s=5.0, interval_s=0.5, quiet_s=2.0)


def _r(
    at: float,
    *,
    done: bool = True,
    output: str = "queued=0",
    delivered: bool = False,
    own: int = 0,
    requests: int = 0,
    size: int = 100,
) -> Reading:
    return Reading(at, done, output, delivered, own, requests, size)


def _reader(readings: list[Reading]) -> Callable[[], Reading]:
    it: Iterator[Reading] = iter(readings)
    return lambda: next(it)


def test_no_quiet_settling_before_the_first_sign_of_life() -> None:
    """A worker that imports for 9 s (quiet_s is 2) while its probe says "nothing pending":
    not settled, however long nothing happens, until it has shown a sign of life."""
    watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=60.0)
    read = _reader([_r(t) for t in (0.5, 3.0, 6.0, 9.0)])
    assert [watch.poll(read) for _ in range(4)] == [None] * 4
    assert watch.alive_at is None
    assert watch.deadline is None  # nor is any deadline running


def test_the_quiet_window_and_the_deadline_count_from_the_first_boundary_hit() -> None:
    watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=60.0)
    read = _reader(
        [
            _r(9.0, own=1, size=150),  # its first trace line: alive at 9
            _r(10.5, own=1, size=150),  # 1.5 s quiet: not yet
            _r(11.0, own=1, size=150),  # 2 s quiet
        ]
    )
    assert watch.poll(read) is None
    assert (watch.alive_at, watch.deadline) == (9.0, 14.0)
    assert watch.poll(read) is None
    decision = watch.poll(read)
    assert isinstance(decision, Settled), decision
    assert decision.by == "nothing happened for 2s"


def test_a_changed_probe_answer_or_a_provider_request_is_a_sign_of_life() -> None:
    for later in (_r(4.0, output="queued=2"), _r(4.0, requests=1)):
        watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=60.0)
        read = _reader([_r(0.5), later])
        watch.poll(read)
        watch.poll(read)
        assert watch.alive_at == 4.0, later


def test_a_deadline_met_as_the_work_finishes_is_decided_on_a_reading_after_it() -> None:
    """At the deadline the probe had said "pending"; read again, the probe says done and the
    provider has accepted everything: settled, and it says it read again."""
    watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=60.0)
    read = _reader(
        [
            _r(1.0, done=False, own=1),
            _r(6.5, done=False, own=2, size=120),  # past 1 + 5: the deadline
            _r(6.6, done=True, delivered=True, own=3, size=140),  # read again after it
        ]
    )
    assert watch.poll(read) is None
    decision = watch.poll(read)
    assert isinstance(decision, Settled), decision
    assert decision.by.endswith("read again at the deadline")
    assert decision.reading.at == 6.6


def test_a_deadline_still_pending_on_the_fresh_reading_is_missed() -> None:
    watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=60.0)
    read = _reader([_r(1.0, done=False, own=1), _r(6.5, done=False, own=1), _r(6.6, done=False)])
    watch.poll(read)
    decision = watch.poll(read)
    assert isinstance(decision, Deadline), decision
    assert decision.never_started is False


def test_a_restarted_worker_with_nothing_to_do_counts_as_started_after_its_allowance() -> None:
    """No sign of life ever (nothing left for it): after its 3 s allowance it counts as
    started, and the quiet window runs from there."""
    watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=3.0)
    read = _reader([_r(1.0), _r(3.0), _r(5.0)])
    assert watch.poll(read) is None
    assert watch.poll(read) is None
    assert watch.alive_by is not None
    assert watch.alive_by.startswith("no sign of life")
    decision = watch.poll(read)
    assert isinstance(decision, Settled), decision


def test_a_start_the_machine_starves_is_waited_for_then_is_a_deadline_it_missed() -> None:
    """Past its allowance while starved, a worker is waited for up to the start-up limit;
    still starved there, the deadline is missed for want of CPU (never_started)."""
    watch = DaemonWatch(SETTLE, spawned_at=0.0, startup_s=3.0, startup_limit_s=10.0,
                        starved=lambda: True)  # fmt: skip
    read = _reader([_r(3.0), _r(6.0), _r(10.0)])
    assert watch.poll(read) is None
    assert watch.poll(read) is None
    assert watch.alive_at is None
    decision = watch.poll(read)
    assert isinstance(decision, Deadline), decision
    assert decision.never_started is True
