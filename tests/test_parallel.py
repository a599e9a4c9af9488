"""``--jobs N``: cases run on several cores (this process plus forked jobs with their own
provider), and the results are the same, in plan order, as a run on one core."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine.case.campaign import Campaign, CampaignSettings, CaseSpec
from harness.engine.case.parallel import run_cases, shard
from harness.errors import BadInputError
from harness.systems import resolve

CASES = [
    "baseline",
    "crash@after_claim#1",
    "crash@after_provider_accept#1",
    "crash@after_response_persisted#1",
    "crash@after_ack#1",
    "crash@before_result_commit#1",
]


def _run(tmp_path: Path, jobs: int) -> list[tuple[str, str, int]]:
    settings = CampaignSettings(
        system=resolve("reference"), seed=9, runs=1, workdir=tmp_path, keep_workdir=True
    )
    with Campaign(settings) as campaign:
        results = run_cases(campaign, [CaseSpec.parse(c) for c in CASES], jobs=jobs)
    return [(r.spec.id, r.verdict.value, r.accepted) for r in results]


def test_two_jobs_give_the_same_results_in_plan_order(tmp_path: Path) -> None:
    one = _run(tmp_path / "one", 1)
    two = _run(tmp_path / "two", 2)
    assert [i for i, _, _ in two] == CASES
    assert two == one
    assert all(v == "pass" for _, v, _ in two)
    # the forked job really ran some of them, in its own work dir
    assert list((tmp_path / "two").rglob("job-2/*/trace.jsonl"))


def test_shards_split_a_plan_round_robin_and_refuse_bad_specs() -> None:
    cases = [CaseSpec.parse(c) for c in CASES]
    parts = [shard(cases, f"{i}/3") for i in (1, 2, 3)]
    assert sorted((c.id for p in parts for c in p), key=CASES.index) == CASES
    assert [c.id for c in parts[0]] == [CASES[0], CASES[3]]
    for bad in ("0/2", "3/2", "x"):
        with pytest.raises(BadInputError, match="--shard"):
            shard(cases, bad)
