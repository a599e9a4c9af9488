"""Choose injections by search: Hypothesis draws schedules, runs each against real processes,
and shrinks any failure to the smallest schedule that still fails.

A schedule is a short list of fault steps (crashes, pauses past the lease, clock jumps, races,
roster changes, restores). Hypothesis's example database keeps every failure it found, so the
next run tries those first; the printed replay command reruns the shrunk schedule exactly.

With ``jobs`` > 1 the budget is split over that many independent searches, one per core:
this process runs the first (with ``seed``), forked jobs the others (seeds derived from it),
each with its own provider, supervisor and work dir (``explore-N``); every schedule is still
run, judged and reported one by one. Each search shrinks its own first failure (the others
run on to their share of the budget), and the smallest failure any search found is the answer:
more schedules per second, not a bug found sooner.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TypedDict

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky

from harness.engine.case import _jobpipe
from harness.engine.case.campaign import Campaign, CaseResult, refuse_own_work
from harness.engine.case.prepare import worker_request_timeout_s
from harness.engine.plan.schedule import CaseSpec, Step
from harness.engine.process import _far_side
from harness.engine.search._landings import Landings
from harness.faults.clock_jump import RETENTION_JUMPS, cleanup_boundaries
from harness.faults.provider import MAX_SLOW_S
from harness.faults.roster_change import VARIANTS as ROSTER_VARIANTS
from harness.invariants import Status

#: boundaries where a pause fault (past the lease, clock jump, snapshot) is worth trying
_PAUSE_POINTS = ("after_claim", "before_retry", "before_reconcile", "after_provider_accept")


#: clock jump sizes, simplest first: just past the key window (the default), inside it, and
#: days past it (beyond a provider's retention period too: orders keep ids up to 72 h)
CLOCK_JUMP_SIZES: tuple[str | None, ...] = (None, "inwindow", "4d")


def jump_sizes(boundaries: tuple[str, ...]) -> tuple[str | None, ...]:
    """The clock jump sizes worth drawing: ``CLOCK_JUMP_SIZES``, and past 30 days, 90 days
    and a year (``RETENTION_JUMPS``) where the system has a cleanup."""
    if cleanup_boundaries(boundaries):
        return (*CLOCK_JUMP_SIZES, *RETENTION_JUMPS)
    return CLOCK_JUMP_SIZES


#: slow replies: inside the worker's 1 s request timeout, and past it
SLOW_REPLY_SIZES: tuple[str, ...] = ("0.3s", "1.5s")
#: a slow reply's sizes as shares of the worker's request timeout: a slow success, and a
#: reply it gives up on (which costs the case that timeout: waited out by the worker itself)
SLOW_REPLY_SHARES = (0.3, 1.5)


def slow_reply_sizes(timeout_s: float) -> tuple[str, ...]:
    """The slow replies explore draws for a worker whose request timeout is ``timeout_s``
    (1 s: ``SLOW_REPLY_SIZES``): one inside it and one past it, the longest a fault may
    hold (``MAX_SLOW_S``) permitting."""
    sizes = [round(timeout_s * share, 3) for share in SLOW_REPLY_SHARES]
    return tuple(f"{size:g}s" for size in sizes if 0 < size <= MAX_SLOW_S)


def step_strategy(
    boundaries: tuple[str, ...],
    reach: Mapping[str, int] | None = None,
    slow_sizes: tuple[str, ...] = SLOW_REPLY_SIZES,
) -> st.SearchStrategy[Step]:
    """One fault step; listed simplest first, which is the direction Hypothesis shrinks to.

    Faults with a size draw it too (``clock_jump@B#1:4d``, ``provider_slow:1.5s``), and a
    slow reply drawn with ``concurrent_claim`` in one schedule races a rival against it.

    ``reach`` is the dry run's hits per boundary: steps are drawn only where a worker gets
    to (a crash at the third hit of a boundary reached once never lands, and a schedule that
    does not land tests nothing), and a race only where there are two items to claim.
    """
    # far-side points (``accepted.NAME``, in ``reach`` when the dry run's providers accepted
    # requests) take a crash only, at a request the dry run saw
    far = tuple(b for b in (reach or {}) if _far_side.is_far_side(b) and (reach or {})[b] > 0)
    boundaries = tuple(b for b in boundaries if not _far_side.is_far_side(b))
    if reach:
        boundaries = tuple(b for b in boundaries if reach.get(b, 0) > 0) or boundaries

    def hits(most: int) -> Callable[[str], st.SearchStrategy[int]]:
        return lambda b: st.integers(1, max(1, min(most, reach.get(b, most) if reach else most)))

    points = tuple(b for b in _PAUSE_POINTS if b in boundaries) or boundaries
    # held at a pause point, a jump comes before that delivery's cleanup (and every later
    # one): a jump past a retention period is judged by the cleanup that runs after it
    sizes = jump_sizes(boundaries)
    crash = st.sampled_from(boundaries + far).flatmap(
        lambda b: hits(3)(b).map(lambda h: Step("crash", b, h))
    )
    roster = st.sampled_from(boundaries).flatmap(
        lambda b: st.builds(
            lambda h, a: Step("roster_change", b, h, a),
            hits(2)(b),
            st.sampled_from(ROSTER_VARIANTS),  # the default first: shrinks towards it
        )
    )
    steps = [
        crash,
        st.builds(lambda b: Step("pause_past_lease", b, 1), st.sampled_from(points)),
        st.builds(
            lambda b, size: Step("clock_jump", b, 1, size),
            st.sampled_from(points),
            st.sampled_from(sizes),
        ),
        roster,
        st.builds(lambda b: Step("restore_backup", b, 1), st.sampled_from(points)),
    ]
    if not reach or reach.get("after_claim", 0) >= 2:
        steps.append(st.just(Step("concurrent_claim")))
    steps.append(
        st.builds(lambda size: Step("provider_slow", arg=size), st.sampled_from(slow_sizes))
    )
    return st.one_of(*steps)


def schedule_strategy(
    boundaries: tuple[str, ...],
    max_steps: int,
    reach: Mapping[str, int] | None = None,
    slow_sizes: tuple[str, ...] = SLOW_REPLY_SIZES,
) -> st.SearchStrategy[CaseSpec]:
    steps = step_strategy(boundaries, reach, slow_sizes)
    return st.lists(steps, min_size=1, max_size=max_steps).map(
        lambda steps: CaseSpec(steps=tuple(steps))
    )


@dataclass
class ExploreResult:
    tried: list[CaseResult] = field(default_factory=list)
    #: the smallest failing schedule after shrinking, if any failed and its rerun failed too
    minimal: CaseResult | None = None
    failures_seen: int = 0
    #: schedules that failed once and passed on a rerun (verdict ``flaky``, runs listed)
    flaky: list[CaseResult] = field(default_factory=list)


def explore(
    campaign: Campaign,
    *,
    budget: int,
    seed: int,
    database_dir: Path | str | None,
    max_steps: int = 3,
    on_case: Callable[[CaseResult], None] | None = None,
    jobs: int = 1,
) -> ExploreResult:
    """After a dry run, search ``budget`` schedules drawn where that dry run reached; shrink
    the first failure found to a minimal schedule. ``tried`` holds the dry run first.

    ``jobs`` > 1 splits the budget over that many independent searches run side by side.
    """
    jobs = max(1, min(jobs, budget))
    # The dry run (no fault) says where a worker gets to, so no schedule is drawn where it
    # cannot land; it is a case like any other, first among those tried.
    dry = campaign.run(CaseSpec())
    refuse_own_work(campaign.settings.system, dry)
    if on_case is not None:
        on_case(dry)
    before = [dry]
    if dry.verdict is Status.FAIL:  # the empty schedule fails: the smallest there is, if real
        if _confirmed(campaign, dry, before, on_case=on_case):
            return ExploreResult(tried=before, minimal=before[-1], failures_seen=len(before))
        dry = before[-1]  # it passed when run again: flaky, folded in below
    reach = {
        **dry.hits_by_worker.get("w1", {}),
        **{b: n for b, n in dry.reached.items() if _far_side.is_far_side(b)},
    }
    campaign.adopt_discovered(dry)  # a discovering system's points are drawn like boundaries
    if jobs == 1:
        found = _search(
            campaign,
            budget=budget,
            seed=seed,
            database_dir=database_dir,
            max_steps=max_steps,
            on_case=on_case,
            reach=reach,
        )
    else:
        found = _explore_jobs(
            campaign,
            budget=budget,
            seed=seed,
            database_dir=database_dir,
            max_steps=max_steps,
            on_case=on_case,
            jobs=jobs,
            reach=reach,
        )
    found.tried[:0] = before
    if len(before) > 1:
        found.flaky += mark_flaky(found.tried, [CaseSpec()])
    # any other schedule run more than once whose runs disagree (pass, then a gap): flaky too
    found.flaky += mark_flaky(found.tried, _disagreeing(found.tried))
    return found


def _disagreeing(tried: list[CaseResult]) -> list[CaseSpec]:
    """Schedules run more than once, not folded yet, whose runs gave other verdicts."""
    verdicts: dict[CaseSpec, set[Status]] = {}
    for r in tried:
        if r.verdict is not Status.FLAKY:
            verdicts.setdefault(r.spec, set()).add(r.verdict)
    return [spec for spec, seen in verdicts.items() if len(seen) > 1]


def _search(
    campaign: Campaign,
    *,
    budget: int,
    seed: int,
    database_dir: Path | str | None,
    max_steps: int,
    on_case: Callable[[CaseResult], None] | None,
    between_cases: Callable[[], None] | None = None,
    reach: Mapping[str, int] | None = None,
) -> ExploreResult:
    """One Hypothesis search of ``budget`` schedules, then the domain shrink of its failure."""
    outcome = ExploreResult()
    boundaries = campaign.settings.system.boundaries
    failing: list[CaseResult] = []
    landings = Landings()
    sizes = slow_reply_sizes(worker_request_timeout_s(campaign.settings))

    def check(case: CaseSpec) -> None:
        may_land = landings.may_land(case)
        if not may_land:
            landings.skipped += 1
        assume(may_land)  # a step of it would not land: draw another in its place
        result = campaign.run(case)
        landings.learn(result)
        outcome.tried.append(result)
        if on_case is not None:
            on_case(result)
        if between_cases is not None:
            between_cases()
        if result.verdict is Status.FAIL:
            failing.append(result)
            broken = [n for n, r in result.invariants.items() if r.status is Status.FAIL]
            raise AssertionError(f"{case.id}: {', '.join(broken)}")

    database = example_database(database_dir)
    test = settings(
        max_examples=budget,
        database=database,
        deadline=None,
        derandomize=False,
        print_blob=False,
        report_multiple_bugs=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )(given(schedule_strategy(boundaries, max_steps, reach, sizes))(check))
    if database is None:
        test = hypothesis_seed(seed)(test)
    else:
        # ``@seed`` also switches the example database off (Hypothesis's rule: a seeded run
        # reproduces, it does not remember). Here the seed fixes what is drawn, and the
        # database still gives back every failure saved before, tried first: what a
        # sharded explore shares. Every case still replays exactly by its own id.
        test._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
    # One example database key per system, so schedules found for one never replay on another.
    digest = hashlib.sha256(campaign.settings.system.name.encode()).digest()
    test._hypothesis_internal_add_digest = digest  # type: ignore[attr-defined]
    flaky: list[CaseSpec] = []
    try:
        test()
    except Flaky:  # FlakyFailure too: the shrunk failure passed when Hypothesis replayed it
        if not failing:
            raise
        flaky.append(_replayed(outcome.tried, failing))
    except AssertionError:
        # Hypothesis replays the shrunk example last: it is the minimal failing schedule.
        outcome.minimal = failing[-1] if failing else None
    outcome.failures_seen = len(failing)
    if outcome.minimal is not None:
        outcome.minimal = simplify(campaign, outcome.minimal, on_case=on_case, tried=outcome.tried)
        if not _confirmed(campaign, outcome.minimal, outcome.tried, on_case=on_case):
            flaky.append(outcome.minimal.spec)
            outcome.minimal = None
    outcome.flaky = mark_flaky(outcome.tried, flaky)
    return outcome


#: where a shared example database keeps its entries in Redis
REDIS_KEY_PREFIX = b"crash-harness-examples:"


def example_database(where: Path | str | None) -> ExampleDatabase | None:
    """The example database at ``where``: a directory, or a ``redis://`` URL that every CI
    job of a sharded explore shares (Hypothesis's ``RedisExampleDatabase``), so a failure
    one job found is replayed first by every job that starts after it."""
    if where is None:
        return None
    text = str(where)
    if text.startswith(("redis://", "rediss://", "unix://")):
        from hypothesis.extra.redis import RedisExampleDatabase
        from redis import Redis

        return RedisExampleDatabase(Redis.from_url(text), key_prefix=REDIS_KEY_PREFIX)
    return DirectoryBasedExampleDatabase(text)


def _replayed(tried: list[CaseResult], failing: list[CaseResult]) -> CaseSpec:
    """The schedule Hypothesis replayed last and saw pass, after it had failed."""
    last = tried[-1]
    failed = {r.spec for r in failing}
    if last.verdict is not Status.FAIL and last.spec in failed:
        return last.spec
    return failing[-1].spec


def _confirmed(
    campaign: Campaign,
    found: CaseResult,
    tried: list[CaseResult],
    *,
    on_case: Callable[[CaseResult], None] | None,
) -> bool:
    """Whether ``found`` fails on a second run too (one more run unless it already did).

    A failure that does not repeat with the same seed and schedule is no violation to
    report: the schedule is flaky (inconclusive), and both runs go in the report.
    """
    runs = [r for r in tried if r.spec == found.spec]
    if sum(1 for r in runs if r.verdict is Status.FAIL) >= 2:
        return all(r.verdict is Status.FAIL for r in runs)
    again = campaign.run(found.spec, slug_prefix="rerun")  # its own trace: both stay on disk
    tried.append(again)
    if on_case is not None:
        on_case(again)
    return again.verdict is Status.FAIL


def mark_flaky(tried: list[CaseResult], specs: list[CaseSpec]) -> list[CaseResult]:
    """Fold every run of each flaky schedule in ``tried`` into one case, verdict ``flaky``.

    The case shows the first failing run's evidence (so its failure stands), or the first
    run's when none failed, and lists every run (``runs``); it takes the place of that
    schedule's first run. Returns the flaky cases.
    """
    found: list[CaseResult] = []
    for spec in dict.fromkeys(specs):
        runs = [r for r in tried if r.spec == spec and r.verdict is not Status.FLAKY]
        failed = [r for r in runs if r.verdict is Status.FAIL]
        if len(runs) < 2 or len({r.verdict for r in runs}) < 2:
            continue
        flaky = replace((failed or runs)[0], verdict=Status.FLAKY, runs=runs)
        at = tried.index(runs[0])
        tried[:] = [r for r in tried if r.spec != spec]
        tried.insert(min(at, len(tried)), flaky)
        found.append(flaky)
    return found


class Reach(TypedDict):
    """What an explore's schedules reached: the report's ``explore`` section carries it."""

    #: documented boundary -> schedules that reached it at least once
    schedules_reaching: dict[str, int]
    boundaries_unreached: list[str]
    #: reached, but no fault step of any schedule landed there
    boundaries_never_faulted: list[str]


def coverage(tried: list[CaseResult], boundaries: tuple[str, ...]) -> Reach:
    """Which documented boundaries the schedules reached, and which a fault step landed on.

    Like sweep's ``pairs_missing``: a search that never reached a boundary never tried a
    fault there, whatever it drew. A step landed if its own record says so (the crash line,
    the pause, the provider's count).
    """
    reaching = {b: 0 for b in boundaries}
    landed: set[str] = set()
    for result in tried:
        for run in result.runs or [result]:
            for b, hits in run.reached.items():
                if b in reaching and hits > 0:
                    reaching[b] += 1
            # a step landed by its own evidence (``CaseResult.step_records``)
            for step, record in zip(run.spec.steps, run.step_records, strict=False):
                if step.boundary is not None and record.landed:
                    landed.add(step.boundary)
    return {
        "schedules_reaching": reaching,
        "boundaries_unreached": [b for b in boundaries if reaching[b] == 0],
        "boundaries_never_faulted": [b for b in boundaries if reaching[b] and b not in landed],
    }


# -- several searches side by side ---------------------------------------------------------


def _explore_jobs(
    campaign: Campaign,
    *,
    budget: int,
    seed: int,
    database_dir: Path | str | None,
    max_steps: int,
    on_case: Callable[[CaseResult], None] | None,
    jobs: int,
    reach: Mapping[str, int],
) -> ExploreResult:
    """Search 1 runs here on ``campaign``; searches 2..jobs run in forked jobs, each with a
    campaign of its own; their results stream back over pipes as each case is judged."""
    shares = [budget // jobs + (1 if j < budget % jobs else 0) for j in range(jobs)]
    outcome = ExploreResult()
    pipes: dict[int, int] = {}  # read fd -> pid
    inbox = _jobpipe.Inbox()
    finals: list[ExploreResult] = []
    errors: list[str] = []
    bad: list[str] = []  # the user's input or glue, said in a line like any bad input

    def take(fd: int, kind: str, value: object) -> None:
        if kind == "error":  # raised once this search is over, not inside it
            errors.append(f"explore job (pid {pipes[fd]}) failed:\n{value}")
        elif kind == "bad_input":
            bad.append(str(value))
        elif kind == "case":
            assert isinstance(value, CaseResult)
            seen(value)
        else:
            assert isinstance(value, ExploreResult)
            finals.append(value)

    def receive(*, block: bool) -> None:
        inbox.receive(block=block, on_message=take, on_closed=lambda fd: _reap(pipes.pop(fd), fd))

    def seen(result: CaseResult) -> None:
        outcome.tried.append(result)
        if on_case is not None:
            on_case(result)

    try:
        for job in range(1, jobs):
            work = partial(
                _job_search,
                budget=shares[job],
                seed=_job_seed(seed, job),
                database_dir=database_dir,
                max_steps=max_steps,
                reach=dict(reach),
            )
            pid, read_fd = _jobpipe.start_job(
                campaign, f"explore-{job + 1}", work, close_in_child=list(pipes)
            )
            pipes[read_fd] = pid
            inbox.add(read_fd)
        mine = _search(
            campaign,
            budget=shares[0],
            seed=seed,
            database_dir=database_dir,
            max_steps=max_steps,
            on_case=seen,
            between_cases=lambda: receive(block=False),
            reach=reach,
        )
        receive(block=True)
        if bad:
            from harness.errors import BadInputError

            raise BadInputError(bad[0])
        if errors:
            from harness.errors import HarnessError

            raise HarnessError("\n".join(errors))
    finally:
        for fd, pid in pipes.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            _reap(pid, fd)
    candidates = [r.minimal for r in (mine, *finals) if r.minimal is not None]
    outcome.failures_seen = sum(r.failures_seen for r in (mine, *finals))
    outcome.minimal = min(candidates, key=lambda r: len(r.spec.steps), default=None)
    flaky = [f.spec for r in (mine, *finals) for f in r.flaky]
    outcome.flaky = mark_flaky(outcome.tried, flaky)
    return outcome


def _job_search(
    campaign: Campaign,
    out_fd: int,
    *,
    budget: int,
    seed: int,
    database_dir: Path | str | None,
    max_steps: int,
    reach: Mapping[str, int],
) -> None:  # pragma: no cover - runs in a forked job
    """One side-by-side search: stream each case, then the search's own outcome."""
    found = _search(
        campaign,
        budget=budget,
        seed=seed,
        database_dir=database_dir,
        max_steps=max_steps,
        on_case=lambda r: _jobpipe.send(out_fd, "case", r),
        reach=reach,
    )
    done = ExploreResult(
        minimal=found.minimal, failures_seen=found.failures_seen, flaky=found.flaky
    )
    _jobpipe.send(out_fd, "done", done)


def shard_seed(seed: int, index: int) -> int:
    """The search seed of explore shard ``index``/n (1-based): the run's seed for the first,
    one fixed by the run's seed and the index for every other. The workload, and so every
    replay line, stays the run's own."""
    return seed if index == 1 else _job_seed(seed, 1000 + index)


def _job_seed(seed: int, job: int) -> int:
    """The seed of search ``job`` (0-based) > 0: fixed by ``seed`` and ``job`` alone."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{job}".encode()).digest()[:8], "big")


def _reap(pid: int, fd: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        os.close(fd)


def _broken(result: CaseResult) -> set[str]:
    return {n for n, r in result.invariants.items() if r.status is Status.FAIL}


def simplify(
    campaign: Campaign,
    found: CaseResult,
    *,
    on_case: Callable[[CaseResult], None] | None = None,
    tried: list[CaseResult] | None = None,
) -> CaseResult:
    """A domain shrink pass after Hypothesis's: prefer fewer steps, then plain crashes.

    Hypothesis shrinks the bytes behind a schedule; it can stop at a local minimum such as
    "restore at X, then crash", when "crash at X, then crash" fails the same way and says more
    plainly what a user must fix. Each candidate is run for real and kept only if it still
    fails, breaking at least one of the same invariants (an invariant tied to the fault
    replaced, such as ``restore_no_replay`` for a restore, may drop out).
    """
    target = _broken(found)
    best = found
    improved = True
    while improved:
        improved = False
        steps = best.spec.steps
        candidates: list[tuple[Step, ...]] = [
            steps[:i] + steps[i + 1 :] for i in range(len(steps)) if len(steps) > 1
        ]
        for i, step in enumerate(steps):
            if step.fault != "crash" and step.boundary is not None and step.hit is not None:
                candidates.append(
                    (*steps[:i], Step("crash", step.boundary, step.hit), *steps[i + 1 :])
                )
        for steps_try in candidates:
            result = campaign.run(CaseSpec(steps=steps_try))
            if tried is not None:
                tried.append(result)
            if on_case is not None:
                on_case(result)
            if result.verdict is Status.FAIL and target & _broken(result):
                best = result
                improved = True
                break
    return best
