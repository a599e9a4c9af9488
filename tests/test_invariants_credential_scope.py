"""``credential_scope`` on hand-built evidence: pass, fail, unknown."""

from __future__ import annotations

from dataclasses import replace

from harness.invariants import (
    CHECKERS,
    AuditRow,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    Observation,
    Policy,
    Status,
    run_checker,
)

NAME = "credential_scope"
POLICY = Policy(
    key_window_s=86_400.0,
    retry_backoff_s=(1.0,),
    max_attempts=3,
    lease_s=30.0,
    credential_scopes={"worker": ("*@example.org",)},
)


def _eff(seq: int, dest: str, outcome: str = "fresh", cred: str = "worker") -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=dest,
        run_id="r1",
        delivery_id=f"dlv_{dest}",
        idempotency_key=f"ik-dlv_{dest}",
        outcome=outcome,
        credential_id=cred,
        received_at=float(seq),
    )


def _attempt(
    n: int, dest: str, cred: str | None = "worker", scope: str | None = "*@example.org"
) -> AuditRow:
    return AuditRow(
        event_id=n,
        delivery_id=f"dlv_{dest}",
        run_id="r1",
        event="attempt",
        worker="w1",
        credential_id=cred,
        destination_scope=scope,
    )


def _obs(
    effects: list[EffectRow], audit: list[AuditRow], policy: Policy | None = POLICY
) -> Observation:
    rows = tuple(
        DeliveryRow(
            delivery_id=e.delivery_id,
            run_id="r1",
            destination=e.destination,
            delivery_status="delivered",
            idempotency_key=e.idempotency_key,
        )
        for e in effects
    )
    ledger = LedgerSnapshot(
        committed_runs=frozenset({"r1"}),
        frozen_destinations={},
        deliveries=rows,
        queue=frozenset(),
        audit=tuple(audit),
    )
    return Observation(intended={"r1": ()}, ledger=ledger, effects=tuple(effects), policy=policy)


def test_sends_inside_scope_audited_with_credential_and_scope_pass() -> None:
    """Every accepted send matches the credential's globs and every attempt names both."""
    effects = [_eff(1, "a@example.org"), _eff(2, "b@example.org")]
    audit = [_attempt(1, "a@example.org"), _attempt(2, "b@example.org")]
    result = run_checker(NAME, CHECKERS[NAME], _obs(effects, audit))
    assert result.status is Status.PASS, result
    assert result.evidence["declared_scopes"] == {"worker": ["*@example.org"]}
    assert result.evidence["audited_attempts"] == 2


def test_a_refusal_or_an_acceptance_outside_the_scope_fails() -> None:
    """The provider refusing a send proves the worker tried; an accepted send to a destination
    outside the declared globs proves the scope was wider than promised."""
    effects = [_eff(1, "a@example.org"), _eff(2, "x@evil.test", "refused"), _eff(3, "y@other.test")]
    result = CHECKERS[NAME](_obs(effects, []))
    assert result.status is Status.FAIL
    problems = result.evidence["problems"]
    assert [p["effect"]["destination"] for p in problems] == ["x@evil.test", "y@other.test"]
    assert "refused" in problems[0]["problem"]
    assert problems[1]["scope"] == ["*@example.org"]


def test_an_audit_that_does_not_name_credential_and_scope_fails() -> None:
    """An attempt event without credential or scope, or naming another credential, fails."""
    effects = [_eff(1, "a@example.org"), _eff(2, "b@example.org")]
    audit = [_attempt(1, "a@example.org", scope=None), _attempt(2, "b@example.org", cred="other")]
    result = CHECKERS[NAME](_obs(effects, audit))
    assert result.status is Status.FAIL
    kinds = [p["problem"] for p in result.evidence["problems"]]
    assert any("does not name" in k for k in kinds)
    assert any("different credential" in k for k in kinds)


def test_an_audit_naming_a_scope_other_than_the_granted_one_fails() -> None:
    """The audit must name the scope the harness granted the credential, not a wider one the
    worker claims: an operator reading the trail would be told a right nobody gave."""
    effects = [_eff(1, "a@example.org"), _eff(2, "b@example.org")]
    audit = [_attempt(1, "a@example.org"), _attempt(2, "b@example.org", scope="*")]
    result = CHECKERS[NAME](_obs(effects, audit))
    assert result.status is Status.FAIL
    [problem] = result.evidence["problems"]
    assert "scope other than the one granted" in str(problem["problem"])
    assert problem["audited_scope"] == "*"
    assert problem["granted_scope"] == ["*@example.org"]


def test_narrowed_credentials_are_judged_by_what_the_provider_saw() -> None:
    """Two credentials, one per group. The worker's audit names the right one for each
    delivery, but the provider saw the first group's credential on the second group's send
    (and refused it): the refusal and the mismatch are both reported."""
    policy = replace(POLICY, credential_scopes={"cred-a": ("*@a.test",), "cred-b": ("*@b.test",)})
    good = [_eff(1, "x@a.test", cred="cred-a"), _eff(2, "y@b.test", cred="cred-b")]
    audit = [
        _attempt(1, "x@a.test", cred="cred-a", scope="*@a.test"),
        _attempt(2, "y@b.test", cred="cred-b", scope="*@b.test"),
    ]
    passed = CHECKERS[NAME](_obs(good, audit, policy))
    assert passed.status is Status.PASS, passed
    assert passed.evidence["accepted_by_credential"] == {"cred-a": 1, "cred-b": 1}
    bad = [good[0], _eff(2, "y@b.test", "refused", cred="cred-a")]
    result = CHECKERS[NAME](_obs(bad, audit, policy))
    assert result.status is Status.FAIL
    kinds = [p["problem"] for p in result.evidence["problems"]]
    assert kinds == [
        "the provider refused a send outside the credential's scope",
        "the audit names a different credential than the provider saw",
    ]


def test_a_credential_with_no_declared_scope_is_unknown() -> None:
    """An accepted send with a credential the scenario never declared cannot be judged."""
    result = run_checker(NAME, CHECKERS[NAME], _obs([_eff(1, "a@example.org", cred="ghost")], []))
    assert result.status is Status.UNKNOWN
    assert result.evidence["undecided"][0]["credential_id"] == "ghost"


def test_missing_evidence_is_unknown() -> None:
    """No effect log or no ledger: unknown, never pass."""
    obs = _obs([_eff(1, "a@example.org")], [])
    for broken in (replace(obs, effects=None), replace(obs, ledger=None)):
        result = run_checker(NAME, CHECKERS[NAME], broken)
        assert result.status is Status.UNKNOWN
        assert "could not be read" in result.summary


def test_a_raise_inside_the_checker_is_unknown() -> None:
    """A scope that is not a glob string makes the checker raise: unknown with traceback."""
    policy = replace(POLICY, credential_scopes={"worker": (42,)})  # type: ignore[dict-item]
    result = run_checker(NAME, CHECKERS[NAME], _obs([_eff(1, "a@example.org")], [], policy))
    assert result.status is Status.UNKNOWN
    assert "TypeError" in result.evidence["traceback"]


def test_without_declared_scopes_the_providers_refusals_decide() -> None:
    """No policy, or one declaring no scopes: only the provider's own refusals can fail."""
    effects = [_eff(1, "anything@anywhere.test")]
    for policy in (None, replace(POLICY, credential_scopes={})):
        result = CHECKERS[NAME](_obs(effects, [], policy))
        assert result.status is Status.PASS, result
        assert result.evidence["declared_scopes"] is None
