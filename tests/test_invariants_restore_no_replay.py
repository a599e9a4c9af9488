"""``restore_no_replay`` on hand-built evidence: pass, fail, unknown."""

from __future__ import annotations

from dataclasses import replace

from harness.engine.store.trace import TraceEvent
from harness.invariants import CHECKERS, EffectRow, Observation, Status, run_checker

NAME = "restore_no_replay"


def _eff(seq: int, dest: str, at: float, outcome: str = "fresh") -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=f"dlv_{dest}",
        idempotency_key=f"ik-dlv_{dest}",
        outcome=outcome,
        received_at=at,
    )


def _restore(t: float, **detail: object) -> TraceEvent:
    return TraceEvent(
        t=t, event="restore", worker="harness", pid=0, detail={"boundary": "after_ack", **detail}
    )


def _obs(effects: list[EffectRow], trace: list[TraceEvent]) -> Observation:
    return Observation(intended={}, ledger=None, effects=tuple(effects), trace=tuple(trace))


def test_no_restore_passes_and_says_so() -> None:
    """Without a restore event there is nothing to replay: pass, saying why."""
    result = run_checker(NAME, CHECKERS[NAME], _obs([_eff(1, "a", 1.0)], []))
    assert result.status is Status.PASS
    assert result.summary == "no restore in this case"


def test_after_a_restore_dedupes_and_new_destinations_are_not_replays() -> None:
    """After the restore: a deduplicated repeat of a, and b's first effect, pass."""
    effects = [_eff(1, "a", 10.0), _eff(2, "a", 30.0, "deduplicated"), _eff(3, "b", 31.0)]
    result = run_checker(NAME, CHECKERS[NAME], _obs(effects, [_restore(20.0)]))
    assert result.status is Status.PASS, result
    assert result.evidence["restores"][0]["by"] == "provider time (from the trace)"


def test_a_second_acceptance_after_the_restore_fails_naming_both_effects() -> None:
    """a accepted before the restore and again after it: a replayed side effect."""
    effects = [_eff(1, "a", 10.0), _eff(2, "a", 30.0, "expired_then_accepted")]
    trace = [
        TraceEvent(t=25.0, event="spawn", worker="w3", pid=3),
        TraceEvent(t=26.0, event="hit", worker="w3", pid=3, boundary="after_claim", hit=1),
    ]
    result = CHECKERS[NAME](_obs(effects, [_restore(20.0), *trace]))
    assert result.status is Status.FAIL
    (replay,) = result.evidence["replayed"]
    assert replay["accepted_before_restore"]["seq"] == 1
    assert replay["replayed_after_restore"]["seq"] == 2
    assert replay["replayed_after_restore"]["nearest_boundary_before"]["boundary"] == "after_claim"


def test_the_cut_uses_the_provider_sequence_when_recorded() -> None:
    """With ``effects_seq`` in the event the cut ignores clocks: seq 2 is after the restore."""
    effects = [_eff(1, "a", 10.0), _eff(2, "a", 5.0, "fresh")]
    result = CHECKERS[NAME](_obs(effects, [_restore(20.0, effects_seq=1)]))
    assert result.status is Status.FAIL
    assert result.evidence["restores"][0]["by"] == "provider seq"


def test_clock_jumps_move_the_restore_onto_the_provider_clock() -> None:
    """A 24 h jump before the restore: an effect at provider time 20 + 86400 - 1 is before it."""
    jump = TraceEvent(
        t=15.0, event="clock_jump", worker="harness", pid=0, detail={"seconds": 86400}
    )
    effects = [_eff(1, "a", 10.0), _eff(2, "a", 86419.0, "fresh")]
    result = CHECKERS[NAME](_obs(effects, [jump, _restore(20.0)]))
    assert result.status is Status.PASS, result


def test_missing_effect_log_is_unknown() -> None:
    """No effect log: unknown, even when no restore happened."""
    result = run_checker(NAME, CHECKERS[NAME], replace(_obs([], []), effects=None))
    assert result.status is Status.UNKNOWN
    assert "could not be read" in result.summary


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """A malformed effect record makes the checker raise: unknown with the traceback."""
    result = run_checker(NAME, CHECKERS[NAME], _obs([None], [_restore(1.0)]))  # type: ignore[list-item]
    assert result.status is Status.UNKNOWN
    assert "AttributeError" in result.evidence["traceback"]


def test_the_provider_clock_lead_at_case_start_is_taken_into_account() -> None:
    """The provider's clock started the case 30 s ahead (an earlier case's jumps): an effect at
    provider time 40 precedes a restore at wall time 20, so a second one at 60 is a replay."""
    effects = [_eff(1, "a", 40.0), _eff(2, "a", 60.0)]
    obs = replace(_obs(effects, [_restore(20.0)]), provider_clock_offset_s=30.0)
    result = CHECKERS[NAME](obs)
    assert result.status is Status.FAIL
    assert result.evidence["restores"][0]["t"] == 50.0


def test_a_recorded_provider_time_beats_the_trace_estimate() -> None:
    """``detail.provider_t`` is the restore on the provider's own clock: it decides the cut."""
    effects = [_eff(1, "a", 40.0), _eff(2, "a", 60.0)]
    result = CHECKERS[NAME](_obs(effects, [_restore(20.0, provider_t=50.0)]))
    assert result.status is Status.FAIL
    assert result.evidence["restores"][0]["by"] == "provider time (recorded)"
