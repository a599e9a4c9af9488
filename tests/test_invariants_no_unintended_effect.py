"""``no_unintended_effect`` on hand-built evidence: pass, fail, unknown, and the counts a
report shows beside intended and accepted."""

from __future__ import annotations

from harness.invariants import CHECKERS, EffectRow, Observation, Policy, Status, run_checker
from harness.invariants._attribution import attribute
from harness.invariants.no_unintended_effect import tally
from harness.reports._common import accepted_cell, effects_line

NAME = "no_unintended_effect"

#: two runs: r1 to alice and bob, r2 to bob and carol
INTENDED = {"r1": ("alice", "bob"), "r2": ("bob", "carol")}


def _eff(
    seq: int,
    dest: str,
    run: str,
    *,
    did: str = "",
    key: str = "",
    outcome: str = "fresh",
    provider: str = "payments",
) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id=run,
        delivery_id=did or f"dlv-{run}-{dest}",
        idempotency_key=key or f"key-{run}-{dest}",
        outcome=outcome,
        provider=provider,
    )


def _intended_effects() -> list[EffectRow]:
    return [
        _eff(1, "alice", "r1"),
        _eff(2, "bob", "r1"),
        _eff(3, "bob", "r2"),
        _eff(4, "carol", "r2"),
    ]


def _obs(effects: list[EffectRow], *, surface: str | None = None) -> Observation:
    policy = Policy(
        key_window_s=60.0, retry_backoff_s=(0.1,), max_attempts=3, lease_s=5.0, surface=surface
    )
    return Observation(intended=INTENDED, ledger=None, effects=tuple(effects), policy=policy)


def _judge(obs: Observation) -> tuple[Status, str, dict[str, object]]:
    result = run_checker(NAME, CHECKERS[NAME], obs)
    return result.status, result.summary, result.evidence


def test_every_effect_on_an_intended_delivery_passes() -> None:
    """One effect per intended (run, recipient), a refused request and a deduplicated one
    beside them: pass, every accepted effect placed; no ledger is needed."""
    effects = [*_intended_effects(), _eff(5, "bob", "r2", outcome="deduplicated")]
    status, summary, evidence = _judge(_obs(effects))
    assert status is Status.PASS, summary
    assert evidence["placed"] == 4
    assert "each on an intended delivery" in summary


def test_a_second_message_under_made_up_ids_fails_naming_each_effect() -> None:
    """Each recipient reached once as intended and once more under a run, delivery id and
    key nobody intended: fail, naming the recipients and, per effect, provider, seq,
    recipient and ids; exactly_once_effect sees one effect per pair and is not the one that
    can tell."""
    again = [_eff(10 + i, e.destination, f"mine-{i}") for i, e in enumerate(_intended_effects())]
    obs = _obs([*_intended_effects(), *again])
    status, summary, evidence = _judge(obs)
    assert status is Status.FAIL, summary
    assert "alice (1), bob (2), carol (1)" in summary
    assert evidence["unintended_count"] == 4
    named = evidence["unintended"]
    assert isinstance(named, list)
    first = named[0]
    assert (first["provider"], first["seq"], first["recipient"]) == ("payments", 10, "alice")
    assert (first["run_id"], first["delivery_id"], first["idempotency_key"]) == (
        "mine-0",
        "dlv-mine-0-alice",
        "key-mine-0-alice",
    )
    assert first["why"] == "run never intended"
    assert first["intended_runs_for_recipient"] == ["r1"]
    assert first["delivery_id_intended"] is False
    assert run_checker("exactly_once_effect", CHECKERS["exactly_once_effect"], obs).status in (
        Status.PASS,
        Status.UNKNOWN,  # no ledger here: it cannot pass, and it still cannot fail
    )


def test_an_intended_run_to_a_recipient_it_never_intended_fails() -> None:
    """r1 sends to carol, whom only r2 intends: a second message to carol, under r1."""
    status, summary, evidence = _judge(_obs([*_intended_effects(), _eff(9, "carol", "r1")]))
    assert status is Status.FAIL, summary
    (named,) = evidence["unintended"]  # type: ignore[misc]
    assert named["why"] == "its run does not intend this recipient"
    assert named["intended_runs_for_recipient"] == ["r2"]


def test_a_made_up_run_with_an_intended_delivery_id_still_fails_and_says_so() -> None:
    """The second copy reuses the real delivery id under a made-up run: it still names no
    intended run, and the evidence says its delivery id is an intended one."""
    from harness.identities import delivery_id_for

    copy = _eff(9, "alice", "mine", did=delivery_id_for("r1", "alice"))
    status, _, evidence = _judge(_obs([*_intended_effects(), copy]))
    assert status is Status.FAIL
    assert evidence["unintended"][0]["delivery_id_intended"] is True  # type: ignore[index]


def test_recipients_compare_in_the_surfaces_normal_form() -> None:
    """On SMTP ``Alice@Example.COM`` is alice@example.com: a copy to that spelling under a
    made-up run fails, named by the recipient's normal form; on an opaque-id surface it is
    someone nobody intended, not judged here."""
    intended = [_eff(1, "alice@example.com", "r1")]
    obs = Observation(
        intended={"r1": ("alice@example.com",)},
        ledger=None,
        effects=(*intended, _eff(2, "Alice@Example.COM ", "mine")),
        policy=Policy(
            key_window_s=60.0, retry_backoff_s=(0.1,), max_attempts=3, lease_s=5.0, surface="smtp"
        ),
    )
    status, summary, _ = _judge(obs)
    assert status is Status.FAIL
    assert "alice@example.com (1)" in summary
    opaque = Observation(intended=obs.intended, ledger=None, effects=obs.effects)
    status, summary, evidence = _judge(opaque)
    assert status is Status.PASS, summary
    assert evidence["elsewhere"] == 1


def test_an_effect_to_a_recipient_nobody_intended_is_not_judged_here() -> None:
    """A worker that also sends to dave (nobody's recipient) passes this checker; the count
    says so (where it sends is frozen_destinations' to judge)."""
    status, summary, evidence = _judge(_obs([*_intended_effects(), _eff(9, "dave", "mine")]))
    assert status is Status.PASS, summary
    assert evidence["elsewhere"] == 1
    assert "1 to recipients nobody in the case intended" in summary


def test_an_effect_that_cannot_be_placed_makes_a_pass_unknown() -> None:
    """No run read, and bob is intended by two runs: attribution cannot place it, so a
    second message to bob cannot be ruled out: unknown, never pass."""
    obs = attribute(_obs([*_intended_effects(), _eff(9, "bob", "", did="")]))
    assert not obs.effects[-1].attributed  # type: ignore[index]
    status, summary, evidence = _judge(obs)
    assert status is Status.UNKNOWN, summary
    assert evidence["unattributed"]["count"] == 1  # type: ignore[index]


def test_a_failure_stands_beside_an_effect_that_cannot_be_placed() -> None:
    """A named unintended effect fails the case even when another could not be placed."""
    obs = attribute(
        _obs([*_intended_effects(), _eff(8, "alice", "mine"), _eff(9, "bob", "", did="")])
    )
    status, _, evidence = _judge(obs)
    assert status is Status.FAIL
    assert evidence["unattributed_effects"] == 1


def test_a_chat_message_without_ids_is_placed_through_its_one_run() -> None:
    """A chat message carries no run id: attribution places it on the one run intending the
    channel, so a correct worker passes."""
    obs = Observation(
        intended={"r1": ("#general",)},
        ledger=None,
        effects=(_eff(1, "#general", "", did=""),),
    )
    status, summary, _ = _judge(attribute(obs))
    assert status is Status.PASS, summary


def test_the_effect_log_unread_is_unknown() -> None:
    """No provider log: unknown, never a pass."""
    status, summary, _ = _judge(Observation(intended=INTENDED, ledger=None, effects=None))
    assert status is Status.UNKNOWN
    assert "could not be read" in summary


def test_counts_per_provider_and_in_the_report_lines() -> None:
    """The tally splits accepted effects by provider into on-intended and unintended, and the
    report's cell and line show the unintended count only when there is one."""
    effects = [
        _eff(1, "alice", "r1", provider="hooks"),
        _eff(2, "bob", "r1", provider="pay"),
        _eff(3, "bob", "r2", provider="pay"),
        _eff(4, "carol", "r2", provider="pay"),
        _eff(5, "carol", "mine", provider="hooks"),
        _eff(6, "carol", "mine2", provider="hooks", outcome="failed_by_fault"),
    ]
    counts = tally(_obs(effects))
    assert counts == {
        "hooks": {"on_intended": 1, "unintended": 1},
        "pay": {"on_intended": 3, "unintended": 0},
    }
    fx = {"intended": 4, "accepted": 5, "on_intended": 4, "unintended": 1}
    assert accepted_cell(fx) == "5/4 (1 unintended)"
    assert accepted_cell({**fx, "unintended": 0}) == "5/4"
    line = effects_line(
        {
            "effects": {
                **fx,
                "by_provider": {
                    "hooks": {"accepted": 2, "requests": 3, "on_intended": 1, "unintended": 1}
                },
            }
        }
    )
    assert "1 to an intended recipient under ids nobody intended" in line
    assert "hooks: 2 accepted of 3 request(s) (1 on intended deliveries, 1 unintended)" in line
