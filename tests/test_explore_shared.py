"""Explore remembers: a failure found is saved in the example database and tried first by
the next search, whether the database is a directory or Redis shared by every CI shard.

Hypothesis's ``@seed`` switches the database off; explore keeps its seed and the database
both, and these tests go red if either is lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.engine.case.campaign import Campaign, CampaignSettings
from harness.engine.search.explore import explore, shard_seed
from harness.systems import resolve
from tests._services import redis_up

#: a Redis database these tests may empty (CI's Redis is the machine's own)
REDIS_URL = "redis://127.0.0.1:6379/11"


def _where(kind: str, tmp_path: Path) -> str:
    if kind == "directory":
        return str(tmp_path / "examples")
    if not redis_up():
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    from redis import Redis

    Redis.from_url(REDIS_URL).flushdb()
    return REDIS_URL


@pytest.mark.parametrize("kind", ["directory", "redis"])
def test_a_failure_one_shard_found_is_the_first_schedule_the_next_shard_tries(
    kind: str, tmp_path: Path
) -> None:
    where = _where(kind, tmp_path)
    settings = CampaignSettings(
        system=resolve("mutant:transcript_rebuild"),
        seed=1,
        runs=1,
        destinations_per_topic=1,
        workdir=tmp_path / "work",
    )
    with Campaign(settings) as campaign:
        first = explore(campaign, budget=30, seed=shard_seed(1, 1), database_dir=where)
    assert first.minimal is not None, [c.spec.id for c in first.tried]
    with Campaign(settings) as campaign:
        # another shard's seed, and a budget of one schedule: only the database can make
        # that one schedule the failure the first shard found
        second = explore(campaign, budget=1, seed=shard_seed(1, 2), database_dir=where)
    tried = [c.spec.id for c in second.tried]
    assert tried[0] == "baseline"  # the dry run
    assert tried[1] == first.minimal.spec.id, tried
    assert second.minimal is not None
    assert second.minimal.spec.id == first.minimal.spec.id


def test_shard_seeds_differ_and_the_first_is_the_runs_own() -> None:
    assert shard_seed(7, 1) == 7
    assert len({shard_seed(7, i) for i in range(1, 9)}) == 8


def test_an_examples_redis_that_is_not_a_url_is_refused() -> None:
    result = CliRunner().invoke(
        main, ["explore", "reference-sweep", "--examples-redis", "127.0.0.1:6379", "--budget", "1"]
    )
    assert result.exit_code == 2, result.output
    assert "--examples-redis: expected a redis://HOST:PORT/DB URL" in result.output
