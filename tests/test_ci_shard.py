"""``--shard auto``: the shard a CI job runs, read from the engine's own variables, each
engine counted from where it counts (GitLab from 1, the others from 0)."""

from __future__ import annotations

import pytest

from harness.engine.plan._ci_shard import detect
from harness.errors import BadInputError


@pytest.mark.parametrize(
    ("env", "spec"),
    [
        ({"CRASH_HARNESS_SHARD": "2/4"}, "2/4"),
        ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "3"}, "1/3"),  # GitLab: 1-based
        ({"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "3"}, "1/3"),  # 0-based
        ({"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "3/3"),
        ({"JOB_COMPLETION_INDEX": "3", "CRASH_HARNESS_SHARD_COUNT": "4"}, "4/4"),
        # the explicit one wins over an engine's (a matrix inside a parallel job)
        ({"CRASH_HARNESS_SHARD": "1/2", "CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "3"}, "1/2"),
    ],
)
def test_each_engine_is_read_from_where_it_counts(env: dict[str, str], spec: str) -> None:
    assert detect(env)[0] == spec


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "no CI engine says which shard this job is"),
        ({"JOB_COMPLETION_INDEX": "0"}, "CRASH_HARNESS_SHARD_COUNT (how many there are)"),
        ({"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "3"}, "shard 4 of 3"),
        ({"CIRCLE_NODE_INDEX": "x", "CIRCLE_NODE_TOTAL": "2"}, "expected whole numbers"),
        ({"CRASH_HARNESS_SHARD": "half"}, "not i/n"),
    ],
)
def test_what_cannot_be_a_shard_is_refused_by_name(env: dict[str, str], said: str) -> None:
    with pytest.raises(BadInputError) as caught:
        detect(env)
    assert said in str(caught.value), caught.value
