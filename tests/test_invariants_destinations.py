"""The checkers that group by destination compare recipients, not strings.

Two spellings of one recipient (``harness.destinations``: NFC and trimmed everywhere, also
case-folded on an e-mail surface) are one person: two accepted effects to them are a
duplicate, a delivery to either spelling is on the frozen list and settles the intent. On a
surface whose ids are case-sensitive, a case-only difference is two destinations.
"""

from __future__ import annotations

import unicodedata

from harness.invariants import (
    CHECKERS,
    AuditRow,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Policy,
    Status,
)

ALICE = "alice@example.com"
ALICE_UPPER = "Alice@Example.com "  # another spelling: case and a trailing space
ZOE_NFC = unicodedata.normalize("NFC", "zoë@example.com")
ZOE_NFD = unicodedata.normalize("NFD", ZOE_NFC)


def _policy(surface: str) -> Policy:
    return Policy(
        key_window_s=86_400.0, retry_backoff_s=(0.1,), max_attempts=3, lease_s=5.0, surface=surface
    )


def _row(dest: str, did: str, *, by: str = "w1", status: str = "delivered") -> DeliveryRow:
    return DeliveryRow(
        delivery_id=did,
        run_id="r1",
        destination=dest,
        delivery_status=status,
        idempotency_key=f"ik-{did}",
        created_by=by,
    )


def _effect(seq: int, dest: str, did: str) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=did,
        idempotency_key=f"ik-{did}",
        outcome="fresh",
    )


def _obs(
    rows: list[DeliveryRow],
    effects: list[EffectRow],
    *,
    intended: tuple[str, ...] = (ALICE,),
    frozen: tuple[str, ...] | None = None,
    surface: str | None = None,
) -> Observation:
    audit = tuple(
        AuditRow(i + 1, r.delivery_id, r.run_id, "enqueued", r.created_by)
        for i, r in enumerate(rows)
    )
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={"r1": intended if frozen is None else frozen},
        deliveries=tuple(rows),
        queue=frozenset(),
        audit=audit,
    )
    return Observation(
        intended={"r1": intended},
        ledger=ledger,
        effects=tuple(effects),
        workers=("w1", "w2"),
        policy=None if surface is None else _policy(surface),
    )


def _check(name: str, obs: Observation) -> Status:
    return CHECKERS[name](obs).status


# -- exactly_once_effect ---------------------------------------------------------------------


def test_two_effects_to_two_spellings_of_one_address_are_a_duplicate_on_email() -> None:
    """'Alice@Example.com ' and 'alice@example.com' for one run: one person, two messages."""
    obs = _obs(
        [_row(ALICE, "d1"), _row(ALICE_UPPER, "d2")],
        [_effect(1, ALICE, "d1"), _effect(2, ALICE_UPPER, "d2")],
        surface="smtp",
    )
    result = CHECKERS["exactly_once_effect"](obs)
    assert result.status is Status.FAIL
    (dup,) = result.evidence["duplicates"]
    assert dup["spellings"] == sorted([ALICE, ALICE_UPPER])
    assert dup["normal_form"] == ALICE
    assert {e["destination"] for e in dup["effects"]} == {ALICE, ALICE_UPPER}
    assert "two or more spellings" in result.summary


def test_one_effect_under_another_spelling_is_exactly_once_on_email() -> None:
    """The other way: one effect to the re-spelled address backs the 'delivered' row."""
    obs = _obs([_row(ALICE, "d1")], [_effect(1, ALICE_UPPER, "d1")], surface="smtp")
    assert _check("exactly_once_effect", obs) is Status.PASS


def test_case_only_difference_is_two_destinations_on_a_case_sensitive_surface() -> None:
    """Chat channel ids are case-sensitive (the fake compares them exactly): C1 and c1 are two
    channels, each reached once; whitespace around an id is still not part of it."""
    two_channels = _obs(
        [_row("C1", "d1"), _row("c1", "d2")],
        [_effect(1, "C1", "d1"), _effect(2, "c1", "d2")],
        intended=("C1", "c1"),
        surface="chat",
    )
    assert _check("exactly_once_effect", two_channels) is Status.PASS
    padded = _obs(
        [_row("C1", "d1"), _row(" C1 ", "d2")],
        [_effect(1, "C1", "d1"), _effect(2, " C1 ", "d2")],
        intended=("C1",),
        surface="chat",
    )
    result = CHECKERS["exactly_once_effect"](padded)
    assert result.status is Status.FAIL
    assert result.evidence["duplicates"][0]["spellings"] == [" C1 ", "C1"]


def test_nfc_and_nfd_spellings_are_one_recipient_without_a_policy() -> None:
    """Canonically equivalent spellings and surrounding whitespace are folded on every
    surface, even when the case gave no policy (the least folding form)."""
    assert ZOE_NFC != ZOE_NFD
    obs = _obs(
        [_row(ZOE_NFC, "d1"), _row(ZOE_NFD, "d2")],
        [_effect(1, ZOE_NFC, "d1"), _effect(2, ZOE_NFD, "d2")],
        intended=(ZOE_NFC,),
    )
    result = CHECKERS["exactly_once_effect"](obs)
    assert result.status is Status.FAIL
    assert set(result.evidence["duplicates"][0]["spellings"]) == {ZOE_NFC, ZOE_NFD}
    spaced = _obs(
        [_row(ALICE, "d1"), _row(f" {ALICE}\t", "d2")],
        [_effect(1, ALICE, "d1"), _effect(2, f" {ALICE}\t", "d2")],
    )
    assert _check("exactly_once_effect", spaced) is Status.FAIL


# -- the other checkers that group by destination --------------------------------------------


def test_one_delivery_identity_counts_two_spellings_as_two_identities_for_one_person() -> None:
    two = _obs(
        [_row(ALICE, "d1"), _row(ALICE_UPPER, "d2")],
        [_effect(1, ALICE, "d1")],
        surface="smtp",
    )
    result = CHECKERS["one_delivery_identity"](two)
    assert result.status is Status.FAIL
    (pair,) = result.evidence["pairs"]
    assert pair["delivery_ids"] == ["d1", "d2"]
    assert pair["spellings"] == sorted([ALICE, ALICE_UPPER])
    # A roster that listed the person twice intends one identity: one row is right.
    listed_twice = _obs(
        [_row(ALICE, "d1")],
        [_effect(1, ALICE, "d1")],
        intended=(ALICE, ALICE_UPPER),
        frozen=(ALICE,),
        surface="smtp",
    )
    assert _check("one_delivery_identity", listed_twice) is Status.PASS
    # On a case-sensitive surface the two spellings are two destinations, so one is missing.
    listed_twice_chat = _obs(
        [_row("C1", "d1")], [_effect(1, "C1", "d1")], intended=("C1", "c1"), surface="chat"
    )
    assert _check("one_delivery_identity", listed_twice_chat) is Status.FAIL


def test_frozen_destinations_takes_a_respelled_delivery_as_on_the_list_on_email() -> None:
    respelled = _obs([_row(ALICE_UPPER, "d1")], [_effect(1, ALICE_UPPER, "d1")], surface="smtp")
    assert _check("frozen_destinations", respelled) is Status.PASS
    # A frozen list spelled differently from the roster at request time names the same people.
    frozen_respelled = _obs(
        [_row(ALICE, "d1")], [_effect(1, ALICE, "d1")], frozen=(ALICE_UPPER,), surface="smtp"
    )
    assert _check("frozen_destinations", frozen_respelled) is Status.PASS
    # On payments an account id is case-sensitive: 'Alice@...' is somebody else's account.
    other_account = _obs(
        [_row("Alice@example.com", "d1")],
        [_effect(1, "Alice@example.com", "d1")],
        surface="payments",
    )
    result = CHECKERS["frozen_destinations"](other_account)
    assert result.status is Status.FAIL


def test_no_silent_loss_is_settled_by_a_row_under_another_spelling() -> None:
    obs = _obs([_row(ALICE_UPPER, "d1")], [_effect(1, ALICE_UPPER, "d1")], surface="smtp")
    assert _check("no_silent_loss", obs) is Status.PASS
    chat = _obs([_row("C1", "d1")], [_effect(1, "C1", "d1")], intended=("c1",), surface="chat")
    assert _check("no_silent_loss", chat) is Status.FAIL


def test_no_restart_duplicates_sees_a_second_item_under_another_spelling() -> None:
    obs = _obs(
        [_row(ALICE, "d1", by="w1"), _row(f"{ALICE} ", "d2", by="w2")],
        [_effect(1, ALICE, "d1")],
    )
    result = CHECKERS["no_restart_duplicates"](obs)
    assert result.status is Status.FAIL
    assert result.evidence["duplicated"][0]["destination"] == ALICE
