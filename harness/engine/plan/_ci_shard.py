"""``--shard auto``: which shard of a campaign this CI job runs, read from the CI engine.

Each engine that runs a job N times in parallel tells each copy its index and the count, in
variables of its own, counted from 0 or from 1; a campaign split by hand would need each
job's ``--shard i/n`` typed into its matrix. ``auto`` reads them, so one job definition
serves every copy, and says which it read: a wrong split is a silent gap in coverage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from harness.errors import BadInputError

#: set by the user where the engine has no variables of its own (a GitHub Actions matrix:
#: ``CRASH_HARNESS_SHARD: ${{ matrix.shard }}/4``): ``i/n``, 1-based
EXPLICIT = "CRASH_HARNESS_SHARD"
#: with a Kubernetes Indexed Job, which tells each pod its index but not the count
COUNT = "CRASH_HARNESS_SHARD_COUNT"


@dataclass(frozen=True)
class _Engine:
    name: str
    index: str
    count: str | None  # None: the count comes from ``COUNT``
    base: int  # what the engine's first index is


#: the engines, in the order they are looked for
ENGINES = (
    _Engine("GitLab CI (parallel)", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1),
    _Engine("CircleCI (parallelism)", "CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),
    _Engine("Buildkite (parallelism)", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),
    _Engine("a Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", None, 0),
)


def detect(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(i/n, where it was read)`` for this job, 1-based; a ``BadInputError`` naming every
    variable looked for when none is set, or when what is set is no index of a count."""
    env = os.environ if env is None else env
    given = env.get(EXPLICIT)
    if given:
        return _checked(given, EXPLICIT), EXPLICIT
    for engine in ENGINES:
        raw_index = env.get(engine.index)
        if raw_index is None or raw_index == "":
            continue
        count_var = engine.count or COUNT
        raw_count = env.get(count_var)
        if not raw_count:
            raise BadInputError(
                f"--shard auto: {engine.index}={raw_index} says this is one job of"
                f" {engine.name}, and {count_var} (how many there are) is not set"
                + ("; set it to the Job's completions" if engine.count is None else "")
            )
        try:
            index = int(raw_index) - engine.base + 1
            count = int(raw_count)
        except ValueError:
            raise BadInputError(
                f"--shard auto: {engine.index}={raw_index!r}, {count_var}={raw_count!r}:"
                " expected whole numbers"
            ) from None
        spec = f"{index}/{count}"
        return _checked(spec, f"{engine.index}, {count_var}"), f"{engine.index}, {count_var}"
    looked = [EXPLICIT, *(e.index for e in ENGINES)]
    raise BadInputError(
        "--shard auto: no CI engine says which shard this job is (looked for "
        + ", ".join(looked)
        + f"); on GitHub Actions set {EXPLICIT}: ${{{{ matrix.shard }}}}/N in the job's env"
    )


def _checked(spec: str, source: str) -> str:
    try:
        index_text, count_text = spec.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise BadInputError(f"--shard auto: {source} gives {spec!r}, not i/n") from None
    if not 1 <= index <= count:
        raise BadInputError(
            f"--shard auto: {source} gives shard {index} of {count}; expected 1 to {count}"
        )
    return f"{index}/{count}"
