"""Narrowed credentials: one provider credential per destination group, granted by the
campaign, enforced by the provider, chosen and recorded by the reference worker, and judged
by ``credential_scope`` from the provider's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.scenario import _settings
from harness.engine.case.campaign import run_campaign
from harness.engine.plan import credentials, scenario
from harness.engine.plan.workload import build_workload
from harness.engine.store._db import DatabaseTarget
from harness.errors import BadInputError
from harness.invariants import Status
from harness.names import BOUNDARIES
from harness.worker_config import SECRETS_ENV_VAR, WorkerConfig

ROSTER = build_workload(1).roster


@pytest.mark.parametrize("mode", ["per-topic", "per-domain"])
def test_each_destination_is_covered_by_exactly_one_narrowed_credential(mode: str) -> None:
    """No grant is ``*``, and every roster destination falls in exactly one group's scope."""
    grants = credentials.grants(mode, ROSTER)
    assert len(grants) >= 2
    assert all("*" not in c.scope for c in grants)
    for dests in ROSTER.values():
        for dest in dests:
            assert [c.credential_id for c in grants if c.allows(dest)] == [
                credentials.choose(grants, dest).credential_id  # type: ignore[union-attr]
            ]
    assert credentials.choose(grants, "stranger@nowhere.test") is None
    assert len({c.secret for c in grants}) == len(grants)


def test_shared_grants_one_credential_for_everything() -> None:
    (only,) = credentials.grants("shared", ROSTER)
    assert (only.credential_id, only.scope, only.scope_text) == ("worker", ("*",), "*")
    with pytest.raises(ValueError, match="unknown credentials mode"):
        credentials.grants("per-tenant", ROSTER)


def test_worker_config_picks_per_destination_and_keeps_secrets_out_of_argv_and_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's config chooses the covering credential (the first one when none covers),
    and survives the environment round trip an exec'd worker makes; secrets never show in
    its repr or its public JSON."""
    grants = credentials.grants("per-topic", ROSTER)
    config = WorkerConfig(
        db=DatabaseTarget(url="sqlite:///x.sqlite"),
        provider_url="http://127.0.0.1:1",
        credential_id=grants[0].credential_id,
        credential_secret=grants[0].secret,
        destination_scope=grants[0].scope_text,
        worker_name="w1",
        credentials=grants,
    )
    for topic, dests in sorted(ROSTER.items()):
        assert config.credential_for(dests[0]).credential_id == f"cred-{topic}"
    assert config.credential_for("stranger@nowhere.test") == grants[0]
    env = config.to_env()
    for cred in grants:
        assert cred.secret not in repr(config)
        assert cred.secret not in env["CRASH_HARNESS_WORKER"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert WorkerConfig.from_env() == config
    monkeypatch.delenv(SECRETS_ENV_VAR)
    shared = WorkerConfig(**{**vars(config), "credentials": ()})
    assert SECRETS_ENV_VAR not in shared.to_env()
    assert shared.credential_for("anyone@x.test").scope == (grants[0].scope_text,)


def _scenario(tmp_path: Path, value: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(f'[scenario]\nsystem = "reference"\n[provider]\ncredentials = "{value}"\n')
    return path


def test_the_scenario_option_is_read_and_checked(tmp_path: Path) -> None:
    """``[provider] credentials`` reaches the campaign; a value it does not know is refused
    with file, line and the values it takes."""
    loaded = scenario.load(_scenario(tmp_path, "per-domain"))
    assert loaded.campaign_fields()["credentials"] == "per-domain"
    assert scenario.load(scenario.resolve_path("reference-certify")).credentials == "shared"
    with pytest.raises(BadInputError, match=r"mine.toml:4: \[provider.credentials\] expected one"):
        scenario.load(_scenario(tmp_path, "per-tenant"))


def test_reference_certifies_clean_with_narrowed_credentials(
    db_url: str | None, tmp_path: Path
) -> None:
    """``reference-narrow-credentials``: baseline and a crash at every boundary with one
    credential per topic. Every case passes every invariant; the provider accepted sends
    under both credentials and refused none; every audit attempt names the credential the
    provider saw and the scope the harness granted it."""
    loaded = scenario.load(scenario.resolve_path("reference-narrow-credentials"))
    settings = _settings(loaded, seed=None, db_url=db_url, keep=False)
    settings.workdir = tmp_path
    result = run_campaign(settings)
    assert [c.verdict for c in result.cases] == [Status.PASS] * 13, [  # + crash@accepted.payments#1
        (c.spec.id, {n: r.summary for n, r in c.invariants.items() if r.status is not Status.PASS})
        for c in result.cases
    ]
    assert result.covered() == sorted(BOUNDARIES)
    for case in result.cases:
        evidence = case.invariants["credential_scope"].evidence
        assert evidence["refused"] == 0
        assert set(evidence["accepted_by_credential"]) == {"cred-topic-1", "cred-topic-2"}
        assert set(evidence["declared_scopes"]) == {"cred-topic-1", "cred-topic-2"}
        assert evidence["audited_attempts"] >= case.intended
