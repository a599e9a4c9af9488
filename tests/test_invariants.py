"""Each checker on hand-built evidence: it passes the right history, fails the wrong one,
and answers unknown when its evidence is missing or it raises."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.invariants import (
    CHECKERS,
    AuditRow,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Policy,
    Status,
    run_all,
    run_checker,
)
from harness.snapshot import body_hash


def _row(
    dest: str,
    *,
    did: str | None = None,
    status: str = "delivered",
    by: str = "w1",
    key: str | None = None,
    at: float = 1.0,
) -> DeliveryRow:
    did = did or f"dlv_{dest}"
    return DeliveryRow(
        delivery_id=did,
        run_id="r1",
        destination=dest,
        delivery_status=status,
        idempotency_key=key or f"ik-{did}",
        created_by=by,
        created_at=at,
        body_hash=body_hash(f"text for {did}"),
    )


def _effect(
    seq: int, dest: str, *, did: str | None = None, key: str | None = None, outcome: str = "fresh"
) -> EffectRow:
    did = did or f"dlv_{dest}"
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=did,
        idempotency_key=key or f"ik-{did}",
        outcome=outcome,
        body_hash=body_hash(f"text for {did}"),
    )


def _audit(rows: list[DeliveryRow]) -> tuple[AuditRow, ...]:
    events = []
    for r in rows:
        events.append(AuditRow(len(events) + 1, r.delivery_id, r.run_id, "enqueued", r.created_by))
        if r.delivery_status == "delivered":
            events.append(AuditRow(len(events) + 1, r.delivery_id, r.run_id, "delivered", "w1"))
    return tuple(events)


def _obs(
    rows: list[DeliveryRow],
    effects: list[EffectRow],
    *,
    committed: bool = True,
    queue: frozenset[str] = frozenset(),
    audit: tuple[AuditRow, ...] | None = None,
    intended: tuple[str, ...] = ("a", "b"),
) -> Observation:
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}) if committed else frozenset(),
        frozen_destinations={"r1": intended} if committed else {},
        deliveries=tuple(rows),
        queue=queue,
        audit=_audit(rows) if audit is None else audit,
    )
    return Observation(
        intended={"r1": intended}, ledger=ledger, effects=tuple(effects), workers=("w1", "w2")
    )


GOOD = _obs(
    [_row("a"), _row("b")],
    [_effect(1, "a"), _effect(2, "b"), _effect(3, "b", outcome="deduplicated")],
)


@pytest.mark.parametrize("name", list(CHECKERS))
def test_reference_history_passes(name: str) -> None:
    """A clean history (one identity, one key, one effect each, audited) passes every checker."""
    result = run_checker(name, CHECKERS[name], GOOD)
    assert result.status is Status.PASS, result


@pytest.mark.parametrize("name", list(CHECKERS))
def test_missing_evidence_is_unknown_never_pass(name: str) -> None:
    """Without a readable ledger or effect log a checker says unknown, with the reason."""
    obs = Observation(intended={"r1": ("a",)}, ledger=None, effects=None)
    result = run_checker(name, CHECKERS[name], obs)
    assert result.status is Status.UNKNOWN
    assert "could not be read" in result.summary


def test_a_checker_that_raises_is_unknown() -> None:
    """An exception inside a checker yields unknown with its traceback as evidence."""

    def broken(obs: Observation) -> object:
        raise ZeroDivisionError("bad maths")

    result = run_checker("broken", broken, GOOD)  # type: ignore[arg-type]
    assert result.status is Status.UNKNOWN
    assert "ZeroDivisionError" in result.evidence["traceback"]


def test_exactly_once_fires_on_two_effects_and_on_delivered_without_effect() -> None:
    """Two accepted effects for one destination, or a 'delivered' row with none, both fail."""
    dup = _obs(
        [_row("a"), _row("b")], [_effect(1, "a"), _effect(2, "a", key="other"), _effect(3, "b")]
    )
    r = CHECKERS["exactly_once_effect"](dup)
    assert r.status is Status.FAIL
    assert r.evidence["duplicates"][0]["destination"] == "a"
    lost = _obs([_row("a"), _row("b")], [_effect(1, "a")])
    r = CHECKERS["exactly_once_effect"](lost)
    assert r.status is Status.FAIL
    assert r.evidence["delivered_without_one_effect"][0]["destination"] == "b"


def test_expired_then_accepted_counts_as_a_second_effect() -> None:
    """A repeat accepted after its key expired is a real second message."""
    obs = _obs(
        [_row("a"), _row("b")],
        [_effect(1, "a"), _effect(2, "a", outcome="expired_then_accepted"), _effect(3, "b")],
    )
    assert CHECKERS["exactly_once_effect"](obs).status is Status.FAIL


def test_no_silent_loss_fires_on_missing_and_stuck_rows() -> None:
    """A destination with no row, or only a pending row, is a loss; unknown is not."""
    obs = _obs([_row("a", status="unknown")], [])
    r = CHECKERS["no_silent_loss"](obs)
    assert r.status is Status.FAIL
    assert r.evidence["lost"] == [{"run_id": "r1", "destination": "b", "why": "no delivery row"}]
    stuck = _obs([_row("a", status="pending"), _row("b", status="failed")], [])
    assert CHECKERS["no_silent_loss"](stuck).evidence["lost"][0]["why"] == "never settled"
    never = _obs([], [], committed=False)
    assert CHECKERS["no_silent_loss"](never).evidence["lost"][0]["why"] == "run never committed"


def test_no_restart_duplicates_fires_only_across_incarnations() -> None:
    """A second identity minted by a restarted worker fails; one worker's rows do not count."""
    rows = [_row("a"), _row("a", did="dlv_again", by="w2", at=2.0), _row("b")]
    r = CHECKERS["no_restart_duplicates"](_obs(rows, []))
    assert r.status is Status.FAIL
    assert [i["created_by"] for i in r.evidence["duplicated"][0]["items"]] == ["w1", "w2"]
    same_worker = [_row("a"), _row("a", did="dlv_again"), _row("b")]
    assert CHECKERS["no_restart_duplicates"](_obs(same_worker, [])).status is Status.PASS
    assert CHECKERS["one_delivery_identity"](_obs(same_worker, [])).status is Status.FAIL


def test_stable_key_fires_on_a_second_key() -> None:
    """Two different keys sent for one delivery fail, naming both keys."""
    obs = _obs(
        [_row("a"), _row("b")],
        [
            _effect(1, "a", key="k1", outcome="failed_by_fault"),
            _effect(2, "a", key="k2"),
            _effect(3, "b"),
        ],
    )
    r = CHECKERS["stable_idempotency_key"](obs)
    assert r.status is Status.FAIL
    assert r.evidence["unstable"][0]["keys_sent"] == ["k1", "k2"]


def test_stable_key_fires_on_one_steady_key_that_is_not_the_ledgers() -> None:
    """Every attempt with the same key, but not the one the ledger froze for the delivery:
    fail, naming the delivery, the key sent and the ledger's key, with the requests."""
    obs = _obs(
        [_row("a", key="ik-ledger"), _row("b")],
        [
            _effect(1, "a", key="ik-minted", outcome="failed_by_fault"),
            _effect(2, "a", key="ik-minted"),
            _effect(3, "b"),
        ],
    )
    r = CHECKERS["stable_idempotency_key"](obs)
    assert r.status is Status.FAIL, r
    assert r.evidence["unstable"] == []
    (found,) = r.evidence["not_the_ledger_key"]
    assert found["delivery_id"] == "dlv_a"
    assert found["ledger_key"] == "ik-ledger"
    assert found["keys_sent"] == ["ik-minted"]
    assert [e["seq"] for e in found["first_requests"]] == [1, 2]
    assert "'ik-minted'" in r.summary
    assert "'ik-ledger'" in r.summary


def test_stable_key_passes_when_every_request_carries_the_ledgers_key() -> None:
    """A 503, a retry and a dedupe hit, all with the ledger's key: pass, compared."""
    obs = _obs(
        [_row("a", key="ik-ledger"), _row("b")],
        [
            _effect(1, "a", key="ik-ledger", outcome="failed_by_fault"),
            _effect(2, "a", key="ik-ledger"),
            _effect(3, "a", key="ik-ledger", outcome="deduplicated"),
            _effect(4, "b"),
        ],
    )
    r = CHECKERS["stable_idempotency_key"](obs)
    assert r.status is Status.PASS, r
    assert r.evidence["compared_with_ledger"] is True
    assert r.evidence["not_the_ledger_key"] == []
    assert "the ledger's key" in r.summary


def test_stable_key_without_a_ledger_key_to_compare_is_unknown() -> None:
    """A delivery the provider received that has no ledger row (or a row with no key) cannot
    be compared: unknown, never pass."""
    no_row = _obs([_row("b")], [_effect(1, "a"), _effect(2, "b")])
    r = CHECKERS["stable_idempotency_key"](no_row)
    assert r.status is Status.UNKNOWN, r
    assert r.evidence["not_compared"][0]["why"] == "no ledger row"
    keyless = _obs([replace(_row("a"), idempotency_key=""), _row("b")], [_effect(1, "a")])
    r = CHECKERS["stable_idempotency_key"](keyless)
    assert r.status is Status.UNKNOWN, r


def test_stable_key_without_a_ledger_adapter_only_judges_stability() -> None:
    """A system plugged in without a ledger adapter has no rows to compare with: the keys the
    provider saw are still judged for stability, and the evidence says why nothing was
    compared (an empty ledger that does hold rows stays unknown, as above)."""
    assert GOOD.ledger is not None
    blind = replace(GOOD.ledger, deliveries=(), no_rows_because="no ledger adapter")
    obs = replace(GOOD, ledger=blind)
    r = CHECKERS["stable_idempotency_key"](obs)
    assert r.status is Status.PASS, r
    assert r.evidence["not_compared_because"] == "no ledger adapter"
    assert "not compared: no ledger adapter" in r.summary
    two = replace(obs, effects=(*(obs.effects or ()), _effect(4, "a", key="other")))
    assert CHECKERS["stable_idempotency_key"](two).status is Status.FAIL
    empty = replace(obs, ledger=replace(blind, no_rows_because=None))
    assert CHECKERS["stable_idempotency_key"](empty).status is Status.UNKNOWN


def test_stable_key_on_a_provider_without_keys_only_judges_stability() -> None:
    """SMTP logs the Message-ID built from the key, not the key: no ledger comparison there,
    but a second key still fails."""
    keyless = Policy(
        key_window_s=0.0, retry_backoff_s=(1.0,), max_attempts=3, lease_s=30.0, provider_keys=False
    )
    obs = replace(
        _obs([_row("a"), _row("b")], [_effect(1, "a", key="<ik-dlv_a@x>"), _effect(2, "b")]),
        policy=keyless,
    )
    r = CHECKERS["stable_idempotency_key"](obs)
    assert r.status is Status.PASS, r
    assert r.evidence["compared_with_ledger"] is False
    assert obs.effects is not None
    two = replace(obs, effects=(*obs.effects, _effect(3, "a", key="<other@x>")))
    assert CHECKERS["stable_idempotency_key"](two).status is Status.FAIL


def test_one_identity_fires_on_missing_and_unintended_rows() -> None:
    """A committed run lacking a destination's row, or having an unintended one, fails."""
    obs = _obs([_row("a"), _row("zzz")], [])
    pairs = CHECKERS["one_delivery_identity"](obs).evidence["pairs"]
    assert {"run_id": "r1", "destination": "b", "delivery_ids": []} in pairs
    assert any(p.get("unintended") for p in pairs)


def test_audit_fires_when_cleanup_took_the_ledger_row() -> None:
    """An effect or audit event whose ledger row is gone is flagged."""
    rows = [_row("a"), _row("b")]
    obs = _obs([rows[0]], [_effect(1, "a"), _effect(2, "b")], audit=_audit(rows))
    r = CHECKERS["audit_survives_cleanup"](obs)
    assert r.status is Status.FAIL
    assert r.evidence["problems"] == [{"delivery_id": "dlv_b", "problem": "ledger row missing"}]
    unaudited = replace(GOOD, ledger=replace(GOOD.ledger, audit=()))  # type: ignore[arg-type]
    assert CHECKERS["audit_survives_cleanup"](unaudited).status is Status.FAIL


def test_run_all_runs_every_checker() -> None:
    """run_all answers for every registered invariant."""
    assert set(run_all(GOOD)) == set(CHECKERS)


def _plain(seq: int, dest: str, key: str) -> EffectRow:
    """A request the provider read no delivery id from."""
    return replace(_effect(seq, dest, key=key), delivery_id="")


def test_stable_key_groups_requests_without_a_delivery_id_by_run_and_destination() -> None:
    """A worker that sends no delivery id (an unchanged one: the provider read only run and
    destination) is not blamed for giving two deliveries two keys; two keys for one (run,
    destination) still fail."""
    assert GOOD.ledger is not None
    blind = replace(GOOD.ledger, deliveries=(), no_rows_because="no ledger adapter")
    plain = replace(
        GOOD,
        ledger=blind,
        effects=(_plain(1, "a", "r1:a"), _plain(2, "b", "r1:b")),
    )
    r = CHECKERS["stable_idempotency_key"](plain)
    assert r.status is Status.PASS, r
    assert r.evidence["deliveries_sent"] == 2
    assert plain.effects is not None
    again = replace(plain, effects=(*plain.effects, _plain(3, "a", "r1:a-2")))
    r = CHECKERS["stable_idempotency_key"](again)
    assert r.status is Status.FAIL, r
    assert r.evidence["unstable"][0]["delivery_id"] == "run r1 to a"
