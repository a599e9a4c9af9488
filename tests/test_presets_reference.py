"""The reference certifies clean on every preset it speaks, reconciling as each one allows.

payments reconciles by lookup, queue-fifo resends inside its 5-minute dedupe window (no
lookup), chat reads the rendered thread for the visible recognizer, smtp searches the
mailbox. Each campaign is a baseline plus a crash at the first hit of all 11 boundaries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import systems
from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.plan import scenario as scenario_mod
from harness.errors import BadInputError
from harness.invariants import Status
from harness.names import BOUNDARIES


def _certify(
    preset: str, tmp_path: Path, *, db_url: str | None = None, options: dict[str, Any] | None = None
) -> None:
    settings = CampaignSettings(
        system=systems.resolve("reference"),
        seed=7,
        db_url=db_url,
        workdir=tmp_path,
        provider_preset=preset,
        provider_options=options or {},
    )
    result = run_campaign(settings)
    verdicts = {c.spec.id: c.verdict.value for c in result.cases}
    failing = {
        c.spec.id: {n: r.summary for n, r in c.invariants.items() if r.status is not Status.PASS}
        for c in result.cases
        if c.verdict is not Status.PASS
    }
    assert set(verdicts.values()) == {"pass"}, failing
    assert len(result.cases) == 13  # baseline, 11 boundaries, the far-side point
    assert result.covered() == sorted(BOUNDARIES)
    assert len(BOUNDARIES) == 11
    assert result.uncovered() == []
    for case in result.cases:
        # Every intended destination got exactly one effect the checkers could attribute.
        assert case.accepted == case.intended == 6, case.spec.id
        if case.spec.boundary:
            assert [w.kind.value for w in case.workers] == ["crashed_as_planned", "completed"]


@pytest.mark.parametrize(
    ("preset", "options"),
    [("payments", {}), ("queue-fifo", {}), ("smtp", {})],
)
def test_reference_certifies_clean_on_preset(
    preset: str, options: dict[str, Any], tmp_path: Path
) -> None:
    _certify(preset, tmp_path, options=options)


def test_reference_certifies_clean_on_chat_with_stripped_metadata(
    db_url: str | None, tmp_path: Path
) -> None:
    """Only the visible ``[ref ch-...]`` survives; SQLite and PostgreSQL alike."""
    _certify("chat", tmp_path, db_url=db_url, options={"strip_metadata": True})


def test_skipping_the_surface_inspection_is_caught_on_chat(tmp_path: Path) -> None:
    """A worker that resends after a dropped reply without reading the thread duplicates."""
    result = run_campaign(
        CampaignSettings(
            system=systems.resolve("mutant:blind_resend_after_timeout"),
            seed=7,
            workdir=tmp_path,
            provider_preset="chat",
            cases=[CaseSpec()],
        )
    )
    (case,) = result.cases
    assert case.verdict is Status.FAIL
    assert case.invariants["exactly_once_effect"].status is Status.FAIL
    assert case.accepted == case.intended + 1


def test_preset_scenarios_load_and_refuse_a_window_without_a_key(tmp_path: Path) -> None:
    for preset in ("queue-fifo", "chat", "smtp"):
        loaded = scenario_mod.load(scenario_mod.builtin_dir() / f"preset-{preset}.toml")
        assert (loaded.provider_preset, loaded.mode) == (preset, "certify")
    chat = scenario_mod.load(scenario_mod.builtin_dir() / "preset-chat.toml")
    assert chat.provider_options == {"strip_metadata": True}
    bad = tmp_path / "bad.toml"
    bad.write_text('[scenario]\nsystem = "reference"\n[provider]\npreset = "chat"\nwindow_s = 60\n')
    with pytest.raises(BadInputError, match="no key"):
        scenario_mod.load(bad)
    bad.write_text(
        '[scenario]\nsystem = "reference"\n[provider]\npreset = "chat"\n'
        "[provider.options]\nno_such = 1\n"
    )
    with pytest.raises(BadInputError, match="no_such"):
        scenario_mod.load(bad)


def _restored(system: str, preset: str, tmp_path: Path, options: dict[str, Any]) -> Any:
    result = run_campaign(
        CampaignSettings(
            system=systems.resolve(system),
            seed=5,
            workdir=tmp_path,
            provider_preset=preset,
            provider_options=options,
            cases=[CaseSpec.parse("restore_backup@after_claim#1")],
        )
    )
    (case,) = result.cases
    return case


@pytest.mark.parametrize(("preset", "options"), [("chat", {"strip_metadata": True}), ("smtp", {})])
def test_a_restored_ledger_is_reconciled_where_nothing_dedupes(
    preset: str, options: dict[str, Any], tmp_path: Path
) -> None:
    """No key, so the restored ledger's "never sent" is checked on the surface first (explore
    found the reference sending twice here); the mutant that trusts the ledger replays."""
    held = _restored("reference", preset, tmp_path / "reference", options)
    assert held.verdict is Status.PASS, {
        n: r.summary for n, r in held.invariants.items() if r.status is not Status.PASS
    }
    assert held.accepted == held.intended
    broken = _restored("mutant:trusts_restored_ledger", preset, tmp_path / "mutant", options)
    assert broken.invariants["restore_no_replay"].status is Status.FAIL
    assert broken.accepted > broken.intended
