"""Fault sizes in case ids: ``clock_jump@B#H:61s|30m|25h|3d|inwindow``, ``provider_slow:1.5s``.

Each size means one thing (the trace and the provider's log show it happened), an old id
replays as before, and a size that means nothing is refused before any case runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.engine.case.campaign import Campaign, CampaignSettings, validate_cases
from harness.engine.case.prepare import worker_request_timeout_s
from harness.engine.plan.schedule import CaseSpec
from harness.engine.search.explore import slow_reply_sizes
from harness.engine.store import trace
from harness.errors import BadInputError
from harness.faults.clock_jump import jump_s
from harness.invariants import Status
from harness.systems import resolve

REF = resolve("reference")
DAY = 86400.0


@pytest.mark.parametrize(
    ("arg", "seconds"),
    [
        (None, DAY + 60),  # no size: just past the window, as every old id meant
        ("90000", 90000.0),  # a bare number is seconds, as old ids wrote it
        ("61s", 61.0),
        ("1.5s", 1.5),
        ("30m", 1800.0),
        ("25h", 90000.0),
        ("3d", 3 * DAY),
        ("inwindow", DAY / 2),
    ],
)
def test_jump_sizes_mean_what_they_say(arg: str | None, seconds: float) -> None:
    """Each spelling is a number of seconds, with a 24 h key window."""
    assert jump_s(arg, DAY) == seconds


@pytest.mark.parametrize(
    ("case", "found"),
    [
        ("clock_jump@before_retry#1:nan", "'nan'"),
        ("clock_jump@before_retry#1:inf", "'inf'"),
        ("clock_jump@before_retry#1:-5s", "'-5s'"),
        ("clock_jump@before_retry#1:0", "'0'"),
        ("clock_jump@before_retry#1:1e9", "'1e9'"),
        ("clock_jump@before_retry#1:999d", "'999d'"),
        ("clock_jump@before_retry#1:5w", "'5w'"),
        ("provider_slow:0s", "'0s'"),
        ("provider_slow:nan", "'nan'"),
        ("provider_slow:1h", "'1h'"),
        ("provider_5xx:0", "'0'"),
        ("provider_timeout:1.5", "'1.5'"),
        ("concurrent_claim:1", "'1'"),
        ("concurrent_claim:99", "'99'"),
        ("crash@after_claim#1:3", "'3'"),
    ],
)
def test_a_size_that_means_nothing_is_bad_input(case: str, found: str) -> None:
    """NaN, infinite, negative, zero and absurd sizes, and an argument to a fault that takes
    none, are refused naming the case, the step, what was expected and what was found."""
    spec = CaseSpec.parse(case)
    with pytest.raises(BadInputError) as caught:
        validate_cases(REF, [CaseSpec.parse("crash@after_claim#1"), spec])
    message = str(caught.value)
    assert f"case {case!r}" in message
    assert f"step {spec.steps[-1]}" in message
    assert "expected " in message
    assert f"found {found}" in message


def test_a_bad_size_stops_the_run_before_any_case(tmp_path: Path) -> None:
    """``replay`` with a good case and a bad one: exit 2, and not even the good case ran."""
    result = CliRunner().invoke(
        main,
        [
            "replay",
            "fault-clock-jump",
            "--case",
            "clock_jump@before_retry#1",
            "--case",
            "clock_jump@before_retry#1:nan",
            "--report-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "clock_jump@before_retry#1:nan" in result.output
    assert "found 'nan'" in result.output
    assert " ok " not in result.output
    assert not (tmp_path / "out").exists()


def _jumps(workdir: Path, spec: CaseSpec) -> list[float]:
    events = trace.read(workdir / spec.slug / "trace.jsonl")
    return [
        float(e.detail["seconds"])
        for e in events
        if e.event == "clock_jump" and e.detail.get("reason") == "clock_jump"
    ]


def test_the_reference_holds_and_the_clock_moves_by_the_size_asked(tmp_path: Path) -> None:
    """Inside the window, a minute past it, and days past it (a retention period too): the
    reference holds each time, and the trace records the jump the id asked for."""
    settings = CampaignSettings(system=REF, seed=4, workdir=tmp_path)
    with Campaign(settings) as campaign:
        window = campaign.settings.worker_overrides.get("key_window_s", DAY)
        for arg, seconds in (("inwindow", window / 2), ("61s", 61.0), ("4d", 4 * DAY)):
            spec = CaseSpec.parse(f"clock_jump@before_retry#1:{arg}")
            result = campaign.run(spec)
            assert result.verdict is Status.PASS, (spec.id, result.invariants, result.notes)
            assert _jumps(tmp_path, spec) == [seconds], spec.id


@pytest.mark.parametrize(
    ("size", "flagged"), [("inwindow", False), ("61s", False), ("", True), ("4d", True)]
)
def test_only_a_jump_past_the_window_exposes_a_worker_that_ignores_it(
    size: str, *, flagged: bool, tmp_path: Path
) -> None:
    """``ignores_key_window`` resends with a key the provider forgot: a jump inside the
    window leaves the key remembered (it holds); past it (the default, days) it is caught."""
    mutant = resolve("mutant:ignores_key_window")
    settings = CampaignSettings(system=mutant, seed=4, workdir=tmp_path)
    case = "clock_jump@before_retry#1" + (f":{size}" if size else "")
    with Campaign(settings) as campaign:
        result = campaign.run(CaseSpec.parse(case))
    status = result.invariants["retry_within_window"].status
    assert status is (Status.FAIL if flagged else Status.PASS), result.invariants
    assert result.verdict is (Status.FAIL if flagged else Status.PASS)


@pytest.mark.parametrize(
    "case",
    [
        "provider_slow:0.3s",
        "provider_slow:1.5s",
        "concurrent_claim+provider_slow:1.5s",
        # the held reply keeps the next delivery waiting: the watchdog flags it while the
        # harness waits for the pause at before_retry (explore found this)
        "pause_past_lease@before_retry#1+provider_slow:1.5s",
    ],
)
def test_a_slow_reply_alone_or_with_a_rival_leaves_the_reference_whole(
    case: str, tmp_path: Path
) -> None:
    """A reply held inside or past the request timeout, alone or while a rival races: the
    reference holds, and the provider's log shows the held reply happened."""
    settings = CampaignSettings(system=REF, seed=4, workdir=tmp_path)
    with Campaign(settings) as campaign:
        result = campaign.run(CaseSpec.parse(case))
        assert campaign.provider is not None
        held = [e for e in campaign.provider.admin.effects() if e.fault == "timeout"]
    assert result.verdict is Status.PASS, (result.invariants, result.notes)
    assert len(held) == 1, "the slow reply never happened"
    assert held[0].outcome == "fresh"


@pytest.mark.parametrize(("size", "flagged"), [("0.3s", False), ("1.5s", True)])
def test_only_a_reply_held_past_the_timeout_exposes_a_worker_that_calls_it_failed(
    size: str, *, flagged: bool, tmp_path: Path
) -> None:
    """``unknown_as_failed`` records a reply it gave up on as failed: a reply held inside the
    1 s request timeout is a slow success (it holds), one held past it is caught."""
    status = _unknown_as_failed(tmp_path, f"provider_slow:{size}")
    assert status is (Status.FAIL if flagged else Status.PASS)


def _unknown_as_failed(tmp_path: Path, case: str, **worker: float) -> Status:
    """``accepted_reconciled_or_unknown`` of ``unknown_as_failed`` in ``case``, its worker
    set as ``worker`` says."""
    settings = CampaignSettings(
        system=resolve("mutant:unknown_as_failed"),
        seed=4,
        runs=1,
        destinations_per_topic=1,
        provider_faults=(),
        workdir=tmp_path,
        worker_overrides=dict(worker),
    )
    assert worker_request_timeout_s(settings) == worker.get("request_timeout_s", 1.0)
    with Campaign(settings) as campaign:
        result = campaign.run(CaseSpec.parse(case))
    return result.invariants["accepted_reconciled_or_unknown"].status


def test_explore_sizes_its_slow_replies_by_the_workers_own_timeout() -> None:
    """One inside the timeout, one past it, whatever the timeout; past the longest hold a
    fault may make, only the one inside."""
    assert slow_reply_sizes(1.0) == ("0.3s", "1.5s")
    assert slow_reply_sizes(0.5) == ("0.15s", "0.75s")
    assert slow_reply_sizes(40.0) == ("12s",)


@pytest.mark.parametrize("flagged", [False, True], ids=["inside", "past"])
def test_sized_by_a_half_second_timeout_they_still_straddle_it(
    tmp_path: Path, *, flagged: bool
) -> None:
    """``reference-explore`` gives its worker 0.5 s: explore then draws 0.15 s and 0.75 s,
    and only the one past the timeout exposes a worker that calls a reply it gave up on
    failed (the 1 s sizes would both be past it)."""
    inside, past = slow_reply_sizes(0.5)
    size = past if flagged else inside
    status = _unknown_as_failed(tmp_path, f"provider_slow:{size}", request_timeout_s=0.5)
    assert status is (Status.FAIL if flagged else Status.PASS)


def test_sized_case_ids_round_trip() -> None:
    """A size is part of the id: it parses and prints back unchanged."""
    for text in (
        "clock_jump@before_retry#1:61s",
        "clock_jump@before_retry#1:inwindow",
        "clock_jump@after_claim#1:3d+provider_slow:1.5s",
    ):
        assert CaseSpec.parse(text).id == text
        validate_cases(REF, [CaseSpec.parse(text)])
