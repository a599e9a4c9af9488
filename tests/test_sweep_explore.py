"""Choosing injections: sweep covers every (boundary, hit) of its dry run; explore finds the
planted two-crash bug and shrinks it to two crashes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.engine.case.campaign import Campaign, CampaignSettings, CaseResult, validate_cases
from harness.engine.plan.schedule import CaseSpec
from harness.engine.results import Landing, StepRecord
from harness.engine.search.explore import explore
from harness.engine.search.sweep import sweep
from harness.invariants import Status
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
    assert len(found.tried) == 16  # the dry run, then the budget
    assert found.tried[0].spec == CaseSpec()
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


def test_explore_draws_only_where_the_dry_run_reached() -> None:
    """With the dry run's reach, no step is drawn at a boundary never reached or a hit past
    its count, and no race where there is one item to claim: such schedules cannot land."""
    from hypothesis import find, given, settings

    from harness.engine.search.explore import schedule_strategy

    boundaries = resolve("reference").boundaries
    reach = {"after_claim": 1, "after_ack": 2, "before_retry": 1}

    @settings(max_examples=300, deadline=None, database=None)
    @given(schedule_strategy(boundaries, 3, reach))
    def drawn_within_reach(case: CaseSpec) -> None:
        for step in case.steps:
            assert step.fault != "concurrent_claim", case.id
            if step.boundary is not None:
                assert step.boundary in reach, case.id
                assert step.hit is not None
                assert step.hit <= reach[step.boundary], case.id

    drawn_within_reach()
    # and the space still holds each reachable kind of step
    find(schedule_strategy(boundaries, 3, reach), lambda c: str(c.steps[0]) == "crash@after_ack#2")
    with_race = {**reach, "after_claim": 3}
    find(
        schedule_strategy(boundaries, 3, with_race),
        lambda c: "concurrent_claim" in {x.fault for x in c.steps},
    )


def test_explore_draws_fault_sizes_and_a_slow_reply_beside_a_rival() -> None:
    """The search space holds clock jumps inside the window and days past it, slow replies
    inside and past the request timeout, and a slow reply in one schedule with a rival."""
    from hypothesis import find

    from harness.engine.search.explore import schedule_strategy

    boundaries = resolve("reference").boundaries
    schedules = schedule_strategy(boundaries, 3)

    def has(*steps: str) -> Callable[[CaseSpec], bool]:
        return lambda case: all(s in {str(x) for x in case.steps} for s in steps)

    for wanted in (
        ("clock_jump@before_retry#1:inwindow",),
        ("clock_jump@before_retry#1:4d",),
        ("provider_slow:0.3s",),
        ("provider_slow:1.5s", "concurrent_claim"),
    ):
        found = find(schedules, has(*wanted))
        validate_cases(resolve("reference"), [found])
        assert has(*wanted)(found), found.id


def test_reference_explore_reaches_before_retry_and_holds(tmp_path: Path) -> None:
    """The explore scenario's provider makes the reference retry: every schedule of a short
    search reaches before_retry (so faults drawn there can land), and none fails."""
    from harness.engine.plan import scenario as scenario_mod
    from harness.engine.search.explore import coverage

    sc = scenario_mod.load(scenario_mod.resolve_path("reference-explore"))
    settings = CampaignSettings(
        system=sc.build_system(), seed=3, workdir=tmp_path, **sc.campaign_fields()
    )
    with Campaign(settings) as campaign:
        found = explore(campaign, budget=8, seed=3, database_dir=None)
    assert found.minimal is None
    assert not found.flaky
    undecided = (Status.FAIL, Status.UNKNOWN, Status.FLAKY)
    assert [r.spec.id for r in found.tried if r.verdict in undecided] == []
    # a drawn schedule whose step did not land is a gap with its reason, never a pass
    assert all(r.not_landed for r in found.tried if r.verdict is Status.GAP)
    reach = coverage(found.tried, settings.system.boundaries)
    assert reach["boundaries_unreached"] == []
    reaching = reach["schedules_reaching"]
    # a crash or fault placed before the first send can stop a schedule short of it
    assert reaching["before_retry"] >= len(found.tried) - 2, reaching


def _ran(case: str, reached: dict[str, int], missed: list[int]) -> CaseResult:
    """A judged case whose steps at the ``missed`` positions did not land."""
    spec = CaseSpec.parse(case)
    records = [
        StepRecord(str(step), Landing.NOT_REACHED if i in missed else Landing.LANDED, "")
        for i, step in enumerate(spec.steps)
    ]
    return CaseResult(
        spec=spec,
        verdict=Status.GAP if missed else Status.PASS,
        invariants={},
        workers=[],
        intended=1,
        accepted=1,
        reached=reached,
        crash_fired=False,
        notes=[],
        duration_s=0.0,
        replay="",
        step_records=records,
    )


def test_explore_coverage_lists_boundaries_never_reached_and_never_faulted() -> None:
    """A boundary no schedule reached is listed as unreached; one reached whose steps never
    landed (by their step records) as never faulted; a landed step counts once it lands."""
    from harness.engine.search.explore import coverage

    boundaries = ("after_claim", "before_retry", "before_reconcile", "after_ack")
    tried = [
        _ran("crash@after_claim#1", {"after_claim": 1, "after_ack": 1}, []),
        _ran(
            "pause_past_lease@before_reconcile#2",
            {"after_claim": 1, "before_reconcile": 1, "after_ack": 1},
            [0],
        ),
        # the same step twice: one landed, one did not
        _ran("clock_jump@after_ack#1+clock_jump@after_ack#1", {"after_ack": 2}, [1]),
    ]
    reach = coverage(tried, boundaries)
    assert reach["boundaries_unreached"] == ["before_retry"]
    assert reach["boundaries_never_faulted"] == ["before_reconcile"]
    assert reach["schedules_reaching"] == {
        "after_claim": 2,
        "before_retry": 0,
        "before_reconcile": 1,
        "after_ack": 3,
    }
