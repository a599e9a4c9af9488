"""Every built-in scenario, run as shipped, gives the outcome it promises, and each of its
planned steps lands.

On 823ada3 three of them passed with a step that never happened: ``boundary-before-retry``
planned ``crash@before_retry#2`` on a workload that retries once, ``reference-no-dedupe``
paused at ``before_retry`` with ``max_attempts = 1`` (no retry at all), and
``fault-provider-faults``' ``provider_5xx:2`` lost its request to the workload's own fault.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.scenario import _settings, expectation
from harness.engine.case.campaign import Campaign, CampaignResult
from harness.engine.case.parallel import run_cases
from harness.engine.plan import scenario as scenario_mod
from harness.errors import ExitStatus
from harness.reports.outcome import judge_result

#: scenarios whose every step's landing and promise a test of their own asserts, with more
#: (the server or broker left behind, how each worker ended): run there, not twice
COVERED_ELSEWHERE = {
    "fault-db-restart": "tests/test_db_restart.py",
    "fault-deploy": "tests/test_deploy.py",
    "mutant-rekeyed-upgrade": "tests/test_deploy.py",
    "mutant-swallows-db-error": "tests/test_mutants.py (its catching scenario)",
}
LISTED = [
    p
    for p in scenario_mod.builtin_paths()
    if scenario_mod.load(p).mode == "list" and p.stem not in COVERED_ELSEWHERE
]


def test_what_is_covered_elsewhere_is_a_builtin() -> None:
    names = {p.stem for p in scenario_mod.builtin_paths()}
    assert set(COVERED_ELSEWHERE) <= names, set(COVERED_ELSEWHERE) - names


@pytest.mark.parametrize("path", LISTED, ids=lambda p: p.stem)
def test_builtin_scenario_lands_every_step_and_keeps_its_promise(
    path: Path, tmp_path: Path
) -> None:
    scenario = scenario_mod.load(path)
    settings = _settings(scenario, seed=None, db_url=None, keep=False)
    settings.cases = list(scenario.cases)
    settings.workdir = tmp_path / "w"
    with Campaign(settings) as campaign:
        result = CampaignResult(settings=settings, workdir=campaign.workdir)
        result.cases.extend(run_cases(campaign, settings.cases, jobs=1))
    not_landed = {c.spec.id: [r.detail for r in c.not_landed] for c in result.cases if c.not_landed}
    assert not_landed == {}
    outcome = judge_result(result, expectation(scenario))
    assert outcome.status is ExitStatus.PASSED, outcome.message
