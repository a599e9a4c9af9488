"""Case ids are the whole truth about a case: they parse, print back, and refuse nonsense."""

from __future__ import annotations

import pytest

from harness.engine.case.campaign import validate_cases
from harness.engine.plan.schedule import CaseSpec, Step
from harness.errors import BadInputError, UnknownBoundaryError
from harness.systems import resolve

REF = resolve("reference")


@pytest.mark.parametrize(
    "text",
    [
        "baseline",
        "crash@after_claim#1",
        "crash@after_claim#1+crash@before_reconcile#2",
        "clock_jump@before_retry#1:90000",
        "concurrent_claim:3",
        "provider_5xx:2",
        "crash@accepted.mail#2",
        "crash@after_send.plain_worker.42#1+crash@before_commit.plain_worker.57#1",
    ],
)
def test_case_ids_round_trip(text: str) -> None:
    """Parsing a case id and printing it gives the same id back."""
    assert CaseSpec.parse(text).id == text


def test_two_crashes_are_crash_during_recovery() -> None:
    """A schedule of two crashes reports the SPEC fault crash_during_recovery."""
    case = CaseSpec.parse("crash@after_claim#1+crash@before_reconcile#1")
    assert case.fault == "crash_during_recovery"
    assert case.steps[1] == Step("crash", "before_reconcile", 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("crash@after_claim", "FAULT\\[@BOUNDARY#HIT\\]"),
        ("crash@after_claim#0", "FAULT\\[@BOUNDARY#HIT\\]"),
        ("crash@after_send.#1", "FAULT\\[@BOUNDARY#HIT\\]"),
        ("crash@after_send..x#1", "FAULT\\[@BOUNDARY#HIT\\]"),
        ("", "empty case id"),
    ],
)
def test_malformed_ids_are_refused(text: str, message: str) -> None:
    """A malformed id is bad input naming the expected shape."""
    with pytest.raises(BadInputError, match=message):
        CaseSpec.parse(text)


def test_unknown_fault_or_boundary_or_missing_place_is_refused() -> None:
    """Validation names the unknown fault, the unknown boundary, or the missing @place."""
    with pytest.raises(BadInputError, match="unknown fault 'crsh'"):
        validate_cases(REF, [CaseSpec.parse("crsh@after_claim#1")])
    with pytest.raises(UnknownBoundaryError, match="'after_clam'"):
        validate_cases(REF, [CaseSpec.parse("crash@after_clam#1")])
    with pytest.raises(BadInputError, match="needs a place"):
        validate_cases(REF, [CaseSpec.parse("pause_past_lease")])
    with pytest.raises(BadInputError, match="takes no @BOUNDARY#HIT"):
        validate_cases(REF, [CaseSpec.parse("concurrent_claim@after_claim#1")])
