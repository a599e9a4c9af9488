"""Where work dirs go: tmpfs when there is one, the user's choice when given."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine.case.campaign import Campaign, CampaignSettings
from harness.engine.store import _scratch
from harness.systems import resolve


def test_env_choice_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_scratch.TMPDIR_ENV, str(tmp_path))
    made = _scratch.make_workdir("crash-harness-")
    assert made.parent == tmp_path
    assert made.name.startswith("crash-harness-")
    assert made.is_dir()


def test_a_campaign_without_a_work_dir_makes_it_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_scratch.TMPDIR_ENV, str(tmp_path))
    campaign = Campaign(CampaignSettings(system=resolve("reference"), seed=1))
    assert campaign.made_workdir
    assert campaign.workdir.parent == tmp_path


def test_a_directory_that_is_not_tmpfs_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_scratch.TMPDIR_ENV, raising=False)
    monkeypatch.setattr(_scratch, "_SHM", str(tmp_path))  # a plain directory, not a mount
    assert _scratch.scratch_root() is None
