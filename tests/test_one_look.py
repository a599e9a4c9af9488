"""One rule for every route: a result reads failed, undecided or not judged the same way on
the console case line, in every report format and in the pytest failure (#26 item 10).

Built from a ``CaseResult`` in memory (no campaign runs), so it is quick; the end-to-end
looks of each format are in ``test_report_looks``.
"""

from __future__ import annotations

import pytest

from harness.cli.scenario import print_case
from harness.engine.plan.schedule import CaseSpec
from harness.engine.results import CaseResult
from harness.invariants import CheckResult, Status, looks
from harness.pytest_plugin import _case_lines
from harness.reports import _common

FAILED = CheckResult(Status.FAIL, "2 effects for one delivery")
UNDECIDED = CheckResult(Status.UNKNOWN, "no_silent_loss could not decide: worker died")
BLIND = CheckResult(Status.UNKNOWN, "[not judged] ledger audit: no audit query")
HELD = CheckResult(Status.PASS, "holds")


def _case() -> CaseResult:
    return CaseResult(
        spec=CaseSpec.parse("crash@after_provider_accept#1"),
        verdict=Status.FAIL,
        invariants={
            "exactly_once_effect": FAILED,
            "no_silent_loss": UNDECIDED,
            "audit_survives_cleanup": BLIND,
            "liveness": HELD,
        },
        workers=[],
        intended=1,
        accepted=2,
        reached={},
        crash_fired=True,
        notes=[],
        duration_s=0.5,
        replay="crash-harness replay x --case crash@after_provider_accept#1",
    )


@pytest.mark.parametrize(
    ("result", "expected"),
    [(FAILED, "fail"), (UNDECIDED, "undecided"), (BLIND, "not_judged"), (HELD, "pass")],
)
def test_a_live_result_and_its_json_look_the_same(result: CheckResult, expected: str) -> None:
    assert looks.look(result) == looks.look(result.to_json()) == expected


def test_the_console_line_names_an_undecided_invariant_as_undecided(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The old console line listed ``no_silent_loss`` among the failed invariants while the
    report said undecided."""
    case = _case()
    print_case(case)
    line = capsys.readouterr().out.splitlines()[0]
    failed, undecided = line.split("s  ", 1)[1].split("; ")
    assert failed.split(", ") == ["exactly_once_effect"]
    assert undecided == "undecided: no_silent_loss"
    assert "audit_survives_cleanup" not in line

    groups = dict(_common.title_parts(case.to_json()))
    assert groups["fail"] == "failed: exactly_once_effect"
    assert groups["undecided"] == "undecided: no_silent_loss"


def test_the_pytest_failure_says_the_look_of_each_named_invariant() -> None:
    lines = list(_case_lines(_case(), ["exactly_once_effect", "no_silent_loss"]))
    assert any(line.startswith("  exactly_once_effect (failed): ") for line in lines)
    assert any(line.startswith("  no_silent_loss (undecided): ") for line in lines)
