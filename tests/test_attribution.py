"""Requests the provider's identification rule could not fully attribute still count.

A mail that names its run but no delivery id is the delivery of its (run, recipient), never
one empty id shared by every such mail (which failed ``stable_idempotency_key`` on a correct
worker). A mail that names no run is joined to the user's own id or to the one intended run
of its recipient; failing that, it is counted apart and the checks it bears on are
*unknown*: never a pass, and never silently ignored.
"""

from __future__ import annotations

from pathlib import Path

from harness.engine.case.campaign import CampaignSettings, CaseResult, run_campaign
from harness.engine.plan.schedule import CaseSpec
from harness.identities import delivery_id_for
from harness.invariants import EffectRow, Observation, Policy, Status, run_all
from harness.invariants._attribution import attribute
from harness.snapshot import unread_ledger
from harness.systems import System
from tests import _orders

#: an SMTP case: no key the provider dedupes on, e-mail normal form
POLICY = Policy(
    key_window_s=0,
    retry_backoff_s=(0.0,),
    max_attempts=1,
    lease_s=5,
    provider_keys=False,
    surface="smtp",
)


def _mail(seq: int, run: str, to: str, message_id: str, delivery: str = "") -> EffectRow:
    """One accepted mail as the harness reads it from the log (no ``X-Delivery-Id``)."""
    return EffectRow(
        seq=seq,
        destination=to,
        run_id=run,
        delivery_id=delivery,
        idempotency_key=message_id,
        outcome="fresh",
        unattributed=None if run or delivery else "unattributed: run rule found no value",
    )


def _judge(intended: dict[str, tuple[str, ...]], *effects: EffectRow) -> dict[str, Status]:
    raw = Observation(
        intended=intended, ledger=unread_ledger("t:S"), effects=effects, policy=POLICY
    )
    return {name: check.status for name, check in run_all(attribute(raw)).items()}


INTENT: dict[str, tuple[str, ...]] = {"ORD-1": ("ann@example.com",), "ORD-2": ("bob@example.com",)}


def test_mail_without_a_delivery_id_is_the_delivery_of_its_run_and_recipient() -> None:
    """Two orders' mails, each with its own stable Message-ID, no ``X-Delivery-Id``: two
    deliveries, each sent with one key. (Before, both fell under delivery "" and
    ``stable_idempotency_key`` failed: "1 delivery(ies) sent with more than one key".)"""
    mails = (
        _mail(1, "ORD-1", "ann@example.com", "<1@s>"),
        _mail(2, "ORD-2", "bob@example.com", "<2@s>"),
    )
    raw = Observation(intended=INTENT, ledger=unread_ledger("t:S"), effects=mails, policy=POLICY)
    attributed = attribute(raw)
    assert attributed.effects is not None
    assert [e.delivery_id for e in attributed.effects] == [
        delivery_id_for("ORD-1", "ann@example.com"),
        delivery_id_for("ORD-2", "bob@example.com"),
    ]
    checks = run_all(attributed)
    key = checks["stable_idempotency_key"]
    assert key.status is Status.PASS, key.summary
    assert key.evidence["deliveries_sent"] == 2
    # the same delivery under two Message-IDs still fails
    again = _judge(INTENT, *mails, _mail(3, "ORD-1", "ann@example.com", "<1-again@s>"))
    assert again["stable_idempotency_key"] is Status.FAIL


def test_a_mail_naming_no_run_is_joined_to_the_one_run_of_its_recipient() -> None:
    """The duplicate is caught though the rule read no run: each recipient is intended by
    exactly one order, so each mail is that order's."""
    bare = [
        _mail(1, "", "ann@example.com", "<a@s>"),
        _mail(2, "", "bob@example.com", "<b@s>"),
        _mail(3, "", "Ann@Example.com", "<c@s>"),  # one person, another spelling
    ]
    statuses = _judge(INTENT, *bare)
    assert statuses["exactly_once_effect"] is Status.FAIL
    assert statuses["no_silent_loss"] is Status.PASS
    raw = Observation(
        intended=INTENT, ledger=unread_ledger("t:S"), effects=tuple(bare), policy=POLICY
    )
    joined = attribute(raw).effects
    assert joined is not None
    assert {(e.run_id, e.joined_by) for e in joined} == {
        ("ORD-1", "destination"),
        ("ORD-2", "destination"),
    }


def test_a_mail_naming_the_users_own_id_is_joined_to_that_run() -> None:
    """One inbox, two orders: the recipient names no single run, but the rule read the
    user's own id (``delivery``), which is an intended run."""
    intent: dict[str, tuple[str, ...]] = {
        "ORD-1": ("ann@example.com",),
        "ORD-2": ("ann@example.com",),
    }
    mails = [
        _mail(1, "", "ann@example.com", "<1@s>", delivery="ORD-1"),
        _mail(2, "", "ann@example.com", "<2@s>", delivery="ORD-2"),
    ]
    statuses = _judge(intent, *mails)
    assert statuses["exactly_once_effect"] is Status.PASS
    assert statuses["no_silent_loss"] is Status.PASS
    assert statuses["stable_idempotency_key"] is Status.PASS
    assert _judge(intent, *mails, mails[0])["exactly_once_effect"] is Status.FAIL


def test_effects_no_rule_can_attribute_make_their_checks_unknown_not_pass() -> None:
    """One inbox, two orders, mails naming no order: which order got two mails cannot be
    told. Never a pass (nor lumped into one "duplicate" under run ""): unknown."""
    intent: dict[str, tuple[str, ...]] = {
        "ORD-1": ("ann@example.com",),
        "ORD-2": ("ann@example.com",),
    }
    bare = [_mail(n, "", "ann@example.com", f"<{n}@s>") for n in (1, 2, 3, 4)]
    statuses = _judge(intent, *bare)
    assert statuses["exactly_once_effect"] is Status.UNKNOWN
    assert statuses["no_silent_loss"] is Status.UNKNOWN
    assert statuses["stable_idempotency_key"] is Status.UNKNOWN
    # an attributed duplicate beside them is still a failure
    attributed = [_mail(5, "ORD-1", "ann@example.com", "<5@s>")] * 2
    assert _judge(intent, *bare, *attributed)["exactly_once_effect"] is Status.FAIL


def _one_case(tmp_path: Path, system: System) -> CaseResult:
    settings = CampaignSettings(
        system=system,
        seed=4,
        workdir=tmp_path,
        provider_preset="smtp",
        provider_faults=(),
        runs=2,
        cases=[CaseSpec()],
    )
    (case,) = run_campaign(settings).cases
    return case


def test_a_worker_mailing_twice_without_a_run_header_fails_exactly_once(tmp_path: Path) -> None:
    """End to end: plain mails (no ``X-Run-Id``), each sent twice; every recipient is one
    order's, so the harness joins each mail to it and the duplicates are caught."""
    case = _one_case(tmp_path, _orders.MAILS_BARE_TWICE)
    check = case.invariants["exactly_once_effect"]
    assert check.status is Status.FAIL, check.summary
    duplicates = check.evidence["duplicates"]
    assert len(duplicates) == 4
    assert {e["joined_by"] for d in duplicates for e in d["effects"]} == {"destination"}


def test_the_same_worker_mailing_one_inbox_is_unknown_not_pass(tmp_path: Path) -> None:
    """Every order to one customer: the doubled mails name no order and the inbox names
    none either. The case is unknown (never a pass), and says why."""
    case = _one_case(tmp_path, _orders.MAILS_BARE_TWICE_ONE_INBOX)
    check = case.invariants["exactly_once_effect"]
    assert check.status is Status.UNKNOWN, check.summary
    assert "could not be attributed to a run" in check.summary
    assert check.evidence["unattributed"]["count"] == 8
    assert "identify = { run =" in check.summary, "the unknown names its fix"
    assert case.verdict is not Status.PASS
