"""explore learns which step combinations land (#26 item 8): a drawn schedule that evidence
says will not land is skipped before it runs, and one that ran is never skipped.

In memory (no campaign): the end-to-end share is measured by benchmarks/bench_sweep_explore.py.
"""

from __future__ import annotations

from harness.engine.plan.schedule import CaseSpec
from harness.engine.process.supervisor import OutcomeKind, WorkerOutcome
from harness.engine.results import CaseResult, Landing, StepRecord
from harness.engine.search._landings import Landings
from harness.invariants import Status


def _result(
    case_id: str, landings: list[tuple[Landing, str]], hits: dict[str, dict[str, int]]
) -> CaseResult:
    spec = CaseSpec.parse(case_id)
    return CaseResult(
        spec=spec,
        verdict=Status.PASS if all(x is Landing.LANDED for x, _ in landings) else Status.GAP,
        invariants={},
        workers=[],
        intended=1,
        accepted=1,
        reached={},
        crash_fired=True,
        notes=[],
        duration_s=0.1,
        replay="",
        hits_by_worker=hits,
        step_records=[
            StepRecord(str(s), how, detail)
            for s, (how, detail) in zip(spec.steps, landings, strict=True)
        ],
    )


#: a pause past the lease lets a rival finish: w3 after it reaches nothing at all
EMPTIED = _result(
    "pause_past_lease@after_claim#1+crash@after_claim#1",
    [
        (Landing.LANDED, "w1 held"),
        (Landing.NOT_REACHED, "w3 reached after_claim 0 time(s) and ended; hit 1 never came"),
    ],
    {"w1": {"after_claim": 1}, "w2": {"after_claim": 2}, "w3": {}},
)
#: after a crash at after_claim#1 the recovery reaches after_ack once, run to its end
ONCE = _result(
    "crash@after_claim#1+crash@after_ack#2",
    [
        (Landing.LANDED, "killed"),
        (Landing.NOT_REACHED, "w2 reached after_ack 1 time(s) and ended; hit 2 never came"),
    ],
    {"w1": {"after_claim": 1}, "w2": {"after_claim": 1, "after_ack": 1}},
)


def test_nothing_known_runs() -> None:
    assert Landings().may_land(CaseSpec.parse("pause_past_lease@after_claim#1+crash@after_ack#1"))


def test_a_step_after_one_that_left_nothing_to_do_is_skipped() -> None:
    learned = Landings()
    learned.learn(EMPTIED)
    assert not learned.may_land(
        CaseSpec.parse("pause_past_lease@after_claim#1+crash@before_retry#1")
    )
    assert learned.may_land(CaseSpec.parse("pause_past_lease@after_claim#1"))
    assert learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@after_claim#1"))


def test_a_hit_past_what_the_next_worker_reached_is_skipped_and_one_within_runs() -> None:
    learned = Landings()
    learned.learn(ONCE)
    assert not learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@after_ack#3"))
    assert learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@after_ack#1"))


def test_a_schedule_that_ran_is_never_skipped() -> None:
    """Hypothesis replays a failure to shrink it: skipping it would lose the failure."""
    learned = Landings()
    learned.learn(EMPTIED)
    assert learned.may_land(EMPTIED.spec)


def test_a_step_that_landed_there_before_is_not_skipped_on_a_later_miss() -> None:
    learned = Landings()
    landed = _result(
        "crash@after_claim#1+crash@after_ack#2",
        [(Landing.LANDED, "killed"), (Landing.LANDED, "killed")],
        {"w1": {"after_claim": 1}, "w2": {"after_ack": 2}},
    )
    learned.learn(landed)
    learned.learn(ONCE)  # the same step missed once: the recovery is not always the same
    assert learned.may_land(
        CaseSpec.parse("crash@after_claim#1+crash@after_ack#2+crash@after_ack#1")
    )


def _worker(name: str, kind: OutcomeKind) -> WorkerOutcome:
    return WorkerOutcome(name, 1, kind, None, None, None, None, 0.0, 0.1)


def _single_crash(last_kind: OutcomeKind = OutcomeKind.COMPLETED) -> CaseResult:
    """crash@after_claim#1 landed on w1; w2, the restart, ran to its end reaching after_ack
    once: what comes after that crash is known before any two-step draw pays to find out."""
    single = _result(
        "crash@after_claim#1",
        [(Landing.LANDED, "w1 killed at after_claim#1 (pid 7)")],
        {"w1": {"after_claim": 1}, "w2": {"after_claim": 1, "after_ack": 1}},
    )
    single.workers = [
        _worker("w1", OutcomeKind.CRASHED_AS_PLANNED),
        _worker("w2", last_kind),
    ]
    return single


def test_a_landed_last_crash_teaches_what_the_restart_reaches() -> None:
    learned = Landings()
    learned.learn(_single_crash())
    assert not learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@after_ack#2"))
    assert not learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@before_retry#1"))
    assert learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@after_ack#1"))


def test_a_restart_that_did_not_run_to_its_end_teaches_nothing() -> None:
    learned = Landings()
    learned.learn(_single_crash(OutcomeKind.HUNG))
    assert learned.may_land(CaseSpec.parse("crash@after_claim#1+crash@after_ack#2"))


def test_a_provider_fault_whose_request_another_rule_took_is_not_drawn_after_it_again() -> None:
    learned = Landings()
    taken = _result(
        "provider_slow:1.5s+provider_slow:0.3s",
        [
            (Landing.LANDED, "the provider applied timeout to 1 request(s)"),
            (
                Landing.UNCONFIRMED,
                "request 1 came, but another fault rule (the workload's own?) was applied to"
                " it first, so timeout was never applied",
            ),
        ],
        {"w1": {}},
    )
    learned.learn(taken)
    assert not learned.may_land(CaseSpec.parse("provider_slow:1.5s+provider_slow:1.5s"))
    assert not learned.may_land(
        CaseSpec.parse("crash@after_claim#1+provider_slow:0.3s+provider_slow:0.3s")
    )
    assert learned.may_land(CaseSpec.parse("crash@after_claim#1+provider_slow:0.3s"))
    # a schedule where the pair did land is the counter-example that lifts the rule
    both = _result(
        "provider_slow:0.3s+provider_slow:1.5s",
        [(Landing.LANDED, "applied"), (Landing.LANDED, "applied")],
        {"w1": {}},
    )
    learned.learn(both)
    assert learned.may_land(CaseSpec.parse("provider_slow:1.5s+provider_slow:1.5s"))
