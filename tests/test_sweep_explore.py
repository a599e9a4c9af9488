"""Choosing injections: sweep covers every (boundary, hit) of its dry run; explore finds the
planted two-crash bug and shrinks it to two crashes."""

from __future__ import annotations

from pathlib import Path

from harness.campaign import Campaign, CampaignSettings
from harness.explore import explore
from harness.invariants import Status
from harness.sweep import sweep
from harness.systems import resolve


def test_sweep_covers_every_hit_of_the_dry_run(tmp_path: Path) -> None:
    """Each (boundary, hit) the dry run reached gets a case whose crash fired, and all pass."""
    settings = CampaignSettings(system=resolve("reference"), seed=2, workdir=tmp_path)
    with Campaign(settings) as campaign:
        results, coverage = sweep(campaign)
    assert coverage.expected, "the dry run reached no boundary"
    assert coverage.covered == coverage.expected
    assert len(results) == 1 + len(coverage.expected)
    assert all(r.verdict is Status.PASS for r in results)
    assert coverage.to_json()["pairs_missing"] == []
    # more than one hit per boundary is swept: the first hit alone would miss these
    assert any(hit > 1 for _, hit in coverage.expected)


def test_depth_two_sweep_crashes_recoveries(tmp_path: Path) -> None:
    """With depth 2 a second crash lands in the recovering worker, and the reference holds."""
    settings = CampaignSettings(
        system=resolve("reference"), seed=2, runs=1, destinations_per_topic=1, workdir=tmp_path
    )
    with Campaign(settings) as campaign:
        results, coverage = sweep(campaign, depth=2, limit=3)
    assert coverage.second_planned > 0
    assert coverage.second_fired == coverage.second_planned
    assert all(r.verdict is Status.PASS for r in results)


def test_explore_finds_and_shrinks_the_planted_two_crash_bug(tmp_path: Path) -> None:
    """The planted mutant survives every single crash; explore shrinks its failure to two."""
    system = resolve("mutant:resend_after_interrupted_recovery")
    settings = CampaignSettings(
        system=system, seed=1, runs=1, destinations_per_topic=2, workdir=tmp_path
    )
    with Campaign(settings) as campaign:
        found = explore(campaign, budget=200, seed=1, database_dir=tmp_path / "examples")
    assert found.minimal is not None, f"not found in {len(found.tried)} schedules"
    steps = found.minimal.spec.steps
    assert [s.fault for s in steps] == ["crash", "crash"], found.minimal.spec.id
    assert found.minimal.invariants["exactly_once_effect"].status is Status.FAIL
    assert "--case" in found.minimal.replay


def test_explore_finds_nothing_on_the_reference(tmp_path: Path) -> None:
    """A bounded explore of the reference flags nothing."""
    settings = CampaignSettings(
        system=resolve("reference"), seed=5, runs=1, destinations_per_topic=2, workdir=tmp_path
    )
    with Campaign(settings) as campaign:
        found = explore(campaign, budget=15, seed=5, database_dir=None)
    assert found.minimal is None
    assert len(found.tried) == 15
    bad = [r.spec.id for r in found.tried if r.verdict in (Status.FAIL, Status.UNKNOWN)]
    assert bad == []
    # a drawn schedule whose crash never came (hit 3 of a one-run workload) or whose race had
    # one racer is no pass: a gap that says what was seen instead
    for r in found.tried:
        if r.verdict is not Status.PASS:
            assert r.verdict is Status.GAP, r.spec.id
            assert r.not_landed, r.spec.id
            assert all(x.detail for x in r.not_landed), r.spec.id


def test_explore_with_two_jobs_runs_two_searches_and_still_shrinks(tmp_path: Path) -> None:
    """``jobs=2`` splits the budget over two searches (one forked); the planted bug is still
    found and shrunk to two crashes, and every schedule tried comes back to this process."""
    system = resolve("mutant:resend_after_interrupted_recovery")
    settings = CampaignSettings(
        system=system, seed=1, runs=1, destinations_per_topic=2, workdir=tmp_path
    )
    with Campaign(settings) as campaign:
        found = explore(campaign, budget=200, seed=1, database_dir=None, jobs=2)
    assert found.minimal is not None, f"not found in {len(found.tried)} schedules"
    assert [s.fault for s in found.minimal.spec.steps] == ["crash", "crash"]
    assert found.minimal.invariants["exactly_once_effect"].status is Status.FAIL
    assert len(found.tried) >= 2
