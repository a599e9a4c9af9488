"""``frozen_destinations`` on hand-built evidence: pass, fail, unknown."""

from __future__ import annotations

from dataclasses import replace

from harness.engine.store.trace import TraceEvent
from harness.invariants import (
    CHECKERS,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Status,
    run_checker,
)

NAME = "frozen_destinations"
LATE = "late-joiner.topic-1@example.org"
ROSTER_CHANGE = TraceEvent(
    t=50.0,
    event="roster_change",
    worker="harness",
    pid=0,
    detail={"added": [LATE], "removed": ["a@example.org"], "committed_before": ["r1"]},
)


def _row(dest: str, by: str = "w1") -> DeliveryRow:
    return DeliveryRow(
        delivery_id=f"dlv_{dest}",
        run_id="r1",
        destination=dest,
        delivery_status="delivered",
        idempotency_key=f"ik-dlv_{dest}",
        created_by=by,
    )


def _eff(seq: int, dest: str) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=f"dlv_{dest}",
        idempotency_key=f"ik-dlv_{dest}",
        outcome="fresh",
        received_at=60.0 + seq,
    )


def _obs(
    rows: list[DeliveryRow],
    effects: list[EffectRow],
    *,
    frozen: tuple[str, ...] = ("a@example.org", "b@example.org"),
    intended: tuple[str, ...] = ("a@example.org", "b@example.org"),
) -> Observation:
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={"r1": frozen},
        deliveries=tuple(rows),
        queue=frozenset(),
        audit=(),
    )
    return Observation(
        intended={"r1": intended},
        ledger=ledger,
        effects=tuple(effects),
        trace=(ROSTER_CHANGE,),
    )


def test_frozen_list_kept_across_a_roster_change_passes_and_quotes_the_change() -> None:
    """The roster lost a and gained a newcomer after commit; deliveries still go to a and b."""
    rows = [_row("a@example.org"), _row("b@example.org", by="w2")]
    effects = [_eff(1, "a@example.org"), _eff(2, "b@example.org")]
    result = run_checker(NAME, CHECKERS[NAME], _obs(rows, effects))
    assert result.status is Status.PASS, result
    assert "despite 1 roster change" in result.summary
    assert result.evidence["roster_changes"][0]["added"] == [LATE]


def test_a_destination_recomputed_after_restart_fails() -> None:
    """A row and an accepted effect for the newcomer are named, with the roster change."""
    rows = [_row("a@example.org"), _row("b@example.org"), _row(LATE, by="w2")]
    effects = [_eff(1, "a@example.org"), _eff(2, "b@example.org"), _eff(3, LATE)]
    result = CHECKERS[NAME](_obs(rows, effects))
    assert result.status is Status.FAIL
    problems = result.evidence["problems"]
    assert [p["problem"].split(":")[0] for p in problems] == ["delivery row", "accepted effect"]
    assert all("added to the roster after" in p["problem"] for p in problems)
    assert problems[0]["created_by"] == "w2"
    assert problems[1]["effect"]["seq"] == 3
    assert result.evidence["roster_changes"][0]["removed"] == ["a@example.org"]


def test_a_frozen_list_that_differs_from_the_requested_roster_fails() -> None:
    """Freezing the roster as it was after the change (not at request time) is caught, and the
    row the rewritten list let through is named too."""
    frozen = ("b@example.org", LATE)
    result = CHECKERS[NAME](_obs([_row("b@example.org"), _row(LATE)], [], frozen=frozen))
    assert result.status is Status.FAIL
    listed, row = result.evidence["problems"]
    assert listed["extra"] == [LATE]
    assert listed["missing"] == ["a@example.org"]
    assert row["destination"] == LATE
    assert row["frozen"] == ["a@example.org", "b@example.org"]


def test_a_committed_run_without_a_frozen_list_fails() -> None:
    """A commit that froze nothing leaves the list to be recomputed later: fail."""
    obs = _obs([], [])
    assert obs.ledger is not None
    broken = replace(obs, ledger=replace(obs.ledger, frozen_destinations={}))
    result = CHECKERS[NAME](broken)
    assert result.status is Status.FAIL
    assert result.evidence["problems"][0]["problem"] == "committed without a frozen list"


def test_a_run_whose_roster_was_emptied_freezes_an_empty_list_and_sends_nothing() -> None:
    """Two drops emptied the roster before the run was committed: it intends nobody, and no
    rows is how a table freezes an empty list (explore's seed 101 drew this on the reference,
    which was failed for it). A send for that run is still off its list."""
    obs = _obs([], [], intended=())
    assert obs.ledger is not None
    emptied = replace(obs, ledger=replace(obs.ledger, frozen_destinations={}))
    assert CHECKERS[NAME](emptied).status is Status.PASS
    sent = replace(emptied, effects=(_eff(1, "a@example.org"),))
    result = CHECKERS[NAME](sent)
    assert result.status is Status.FAIL
    assert result.evidence["problems"][0]["problem"] == (
        "accepted effect: destination is not on the list frozen at commit"
    )


def test_missing_evidence_is_unknown() -> None:
    """No ledger or no effect log: unknown, never pass."""
    obs = _obs([_row("a@example.org")], [])
    for broken in (replace(obs, ledger=None), replace(obs, effects=None)):
        result = run_checker(NAME, CHECKERS[NAME], broken)
        assert result.status is Status.UNKNOWN
        assert "could not be read" in result.summary


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """A frozen list that is not a list of destinations makes the checker raise: unknown."""
    result = run_checker(NAME, CHECKERS[NAME], _obs([_row("a@example.org")], [], frozen=None))  # type: ignore[arg-type]
    assert result.status is Status.UNKNOWN
    assert "TypeError" in result.evidence["traceback"]
