"""Time that reaches a retention period (#26 item 5): where a system has a cleanup, the
built-in scenarios and explore jump every clock past 30 days, 90 days and a year.

A cleanup that prunes audit rows after 30 days never runs in a campaign whose clock stops at
3 days; these say the jumps are planned, drawn, land, and leave the reference whole.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import find, settings

from harness.engine.case.campaign import Campaign, CampaignSettings
from harness.engine.plan import scenario as scenario_mod
from harness.engine.plan.schedule import Step
from harness.engine.search.explore import CLOCK_JUMP_SIZES, jump_sizes, step_strategy
from harness.engine.store import trace
from harness.faults.clock_jump import RETENTION_JUMPS, check_arg, cleanup_boundaries
from harness.invariants import Status
from harness.systems import resolve

REF = resolve("reference")
DAY = 86400.0
#: the retention periods a jump must pass: 30 days, 90 days, a year
PERIODS_S = (30 * DAY, 90 * DAY, 365 * DAY)


def _builtin_jumps() -> dict[str, list[float]]:
    """Built-in scenario -> the clock jump sizes (seconds) its case list plans, for the
    scenarios of a system with a cleanup."""
    found: dict[str, list[float]] = {}
    for path in scenario_mod.builtin_paths():
        scenario = scenario_mod.load(path)
        if not cleanup_boundaries(scenario.checked_system().boundaries):
            continue
        for spec in scenario.cases:
            for step in spec.steps:
                if step.fault == "clock_jump" and step.arg and check_arg(step.arg) is not None:
                    found.setdefault(scenario.name, []).append(float(check_arg(step.arg) or 0))
    return found


def test_the_reference_has_a_cleanup() -> None:
    assert cleanup_boundaries(REF.boundaries) == ("after_cleanup",)


def test_built_in_scenarios_jump_past_each_retention_period() -> None:
    jumps = [s for sizes in _builtin_jumps().values() for s in sizes]
    for period in PERIODS_S:
        assert any(s > period for s in jumps), f"no built-in jump past {period / DAY:g} days"


def test_explore_draws_past_each_retention_period_where_the_system_cleans_up() -> None:
    assert set(RETENTION_JUMPS) <= set(jump_sizes(REF.boundaries))
    assert jump_sizes(tuple(b for b in REF.boundaries if b != "after_cleanup")) == (
        CLOCK_JUMP_SIZES
    )
    for size, period in zip(RETENTION_JUMPS, PERIODS_S, strict=True):
        assert (check_arg(size) or 0) > period

    strategy = step_strategy(REF.boundaries, reach=dict.fromkeys(REF.boundaries, 2))
    for size in RETENTION_JUMPS:
        step: Step = find(
            strategy,
            lambda s, size=size: s.fault == "clock_jump" and s.arg == size,  # type: ignore[misc]
            settings=settings(max_examples=2000, database=None),
        )
        assert step.arg == size


def test_the_built_in_retention_jumps_land_and_the_reference_holds(tmp_path: Path) -> None:
    """Each built-in jump past a retention period lands (the trace records the jump asked
    for) and the reference's cleanup, run after it, leaves every invariant holding."""
    scenario = scenario_mod.load(scenario_mod.resolve_path("fault-clock-jump"))
    specs = [
        s
        for s in scenario.cases
        if any(x.fault == "clock_jump" and x.arg in RETENTION_JUMPS for x in s.steps)
    ]
    assert {x.arg for s in specs for x in s.steps} == set(RETENTION_JUMPS)
    with Campaign(CampaignSettings(system=REF, seed=1, workdir=tmp_path)) as campaign:
        for spec in specs:
            result = campaign.run(spec)
            assert result.verdict is Status.PASS, (spec.id, result.invariants, result.notes)
            jumped = [
                float(e.detail["seconds"])
                for e in trace.read(tmp_path / spec.slug / "trace.jsonl")
                if e.event == "clock_jump" and e.detail.get("reason") == "clock_jump"
            ]
            assert jumped == [check_arg(spec.steps[0].arg or "")], spec.id
