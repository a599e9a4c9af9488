"""Two runs of one seed write the same reports once their declared measurements are set aside
(``harness.engine.search.determinism.content``): the clock, durations, pids, the work dir, what a
race
decided (a racing case lists those fields in its ``measured``) and what a wall-clock watchdog
saw. Everything else, including which recipient a fault lands on and the order of cases,
workers, invariants and evidence, must not move. A failure names the first field that did.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderProcess
from harness import systems
from harness.engine.case.campaign import (
    Campaign,
    CampaignSettings,
    CaseResult,
    CaseSpec,
)
from harness.engine.case.prepare import _case_rules
from harness.engine.results import Landing, StepRecord
from harness.engine.search.determinism import content, first_difference, rerun_sample
from harness.engine.search.recovery import RECOVERY_SAMPLE
from harness.faults.provider import pin_workload_rules, pinned_delivery
from harness.invariants import Status
from tests.conftest import PG_ENV

ROOT = Path(__file__).resolve().parent.parent


def _cli(tmp_path: Path, out: Path, *words: str) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *words, "--report-dir", str(out)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _explore(tmp_path: Path, n: int) -> Path:
    # seed 2 draws a race with a slow reply (``concurrent_claim+provider_slow:1.5s``): the
    # send it holds was once whichever racer sent first
    words = ("explore", "reference-explore", "--budget", "10", "--seed", "2")
    return _cli(tmp_path, tmp_path / f"r{n}", *words, "--examples-dir", str(tmp_path / f"ex{n}"))


def _report(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "report.json").read_text())
    return data


def _assert_same_content(first: Path, second: Path) -> None:
    a, b = (content(_report(d)) for d in (first, second))
    difference = first_difference(a, b)
    assert difference is None, f"two runs of one seed differ at {difference}"
    assert json.dumps(a, indent=1) == json.dumps(b, indent=1)  # key order too


def _numbers_aside(text: str) -> str:
    text = re.sub(r"pid \d+", "pid N", text)
    text = re.sub(r'(timestamp|time)="[^"]*"', r'\1="N"', text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def test_two_explore_runs_of_one_seed_write_the_same_content() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        first, second = (_explore(Path(tmp), n) for n in (1, 2))
        report = _report(first)
        assert len(report["cases"]) == 11  # the dry run and the budget
        raced = [c for c in report["cases"] if "concurrent_claim" in c["id"]]
        assert any("provider_slow" in c["id"] for c in raced), "pick a seed that races a fault"
        for case in raced:  # racers are listed in the order they were started
            names = [w["worker"] for w in case["workers"]]
            assert names == sorted(names), names
            assert "boundaries_reached" in case["measured"], case["id"]
        _assert_same_content(first, second)
        for name in ("report.md", "report.xml"):
            a, b = ((d / name).read_text() for d in (first, second))
            assert _numbers_aside(a) == _numbers_aside(b), name


def test_a_race_lands_a_provider_fault_on_the_recipient_the_seed_picks(tmp_path: Path) -> None:
    """Four runs of a racing case with a slow reply: the held send is always the delivery
    drawn from the seed and the case id, whichever racer got to the provider first, and the
    landing names it; before, it was the first send of the race (any recipient)."""
    case = CaseSpec.parse("concurrent_claim+provider_slow:1.5s")
    settings = CampaignSettings(system=systems.resolve("reference"), seed=2, workdir=tmp_path)
    held: list[tuple[str | None, str | None]] = []
    landings: list[str] = []
    with Campaign(settings) as campaign:
        assert campaign.provider is not None
        for _ in range(4):
            result = campaign.run(case)
            assert result.verdict is Status.PASS, (result.invariants, result.notes)
            effects = campaign.provider.admin.effects()  # the case's own epoch
            held += [(e.run_id, e.destination) for e in effects if e.fault == "timeout"]
            landings.append(result.step_records[1].detail)
    intended = campaign.workload.intended()
    pick = pinned_delivery(2, case.id, 1, intended, roster_may_change=False)
    assert held == [(pick["run_id"], pick["destination"])] * 4
    assert len(set(landings)) == 1, landings
    assert pick["destination"] in landings[0]


#: the workload rules of reference-explore: "the 1st send is dropped, the 2nd gets a 503"
_NTH_RULES = (
    {"fault": "accept_then_drop", "nth": 1},
    {"fault": "status", "status": 503, "nth": 2},
)


def _faulted(provider: ProviderProcess, rules: list[FaultRule], order: list[str]) -> set[Any]:
    """Which recipient each fault met when ``order``'s recipients are sent to in that order."""
    epoch = provider.admin.reset(rules)
    url = f"{provider.url}/epoch/{epoch}/v1/messages"
    with requests.Session() as session:
        for dest in order:
            body = {"destination": dest, "run_id": "run-0", "delivery_id": f"d-{dest}"}
            headers = {**provider.auth_headers(), "Idempotency-Key": f"k-{dest}"}
            with contextlib.suppress(requests.ConnectionError):  # a dropped reply
                session.post(url, json={**body, "body": "hi"}, headers=headers, timeout=5)
    return {(e.fault, e.destination) for e in provider.admin.effects(epoch=epoch) if e.fault}


def test_a_race_cannot_move_the_workloads_nth_send_faults(tmp_path: Path) -> None:
    """The workload's "N-th send" rules in a racing case are pinned to deliveries drawn
    from the seed: sent in either order, the same recipients meet the same faults, two
    faults on two recipients (before: the 1st and 2nd send, whichever recipient a race
    put there). A case without a race keeps the rules as written."""
    intended = {"run-0": ("a@x.org", "b@x.org")}
    racing = _case_rules(_NTH_RULES, CaseSpec.parse("concurrent_claim"), 3, intended, provider="")
    plain = _case_rules(_NTH_RULES, CaseSpec(), 3, intended, provider="")
    assert plain == [FaultRule(**r) for r in _NTH_RULES]
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        forth = _faulted(provider, racing, ["a@x.org", "b@x.org"])
        back = _faulted(provider, racing, ["b@x.org", "a@x.org"])
    assert forth == back
    assert {fault for fault, _ in forth} == {"accept_then_drop", "status"}
    assert {dest for _, dest in forth} == {"a@x.org", "b@x.org"}
    again = _case_rules(_NTH_RULES, CaseSpec.parse("concurrent_claim"), 3, intended, provider="")
    assert again == racing  # the same seed and case pin the same way every run


def test_pinned_rules_keep_which_sends_they_fault() -> None:
    """Read as sends going round the deliveries in the seed's order, a pinned rule covers
    the same sends: 2 of 3 sends from the 3rd on, dice per delivery, an open tail open."""
    intended = {"r": ("a", "b")}
    [rule] = [FaultRule(fault="status", status=503, nth=3, times=3, probability=0.5, seed=4)]
    pinned = pin_workload_rules(
        [rule], seed=3, case_id="c", intended=intended, roster_may_change=False
    )
    covered = sorted((r.match["destination"], r.nth, r.times) for r in pinned)
    first, second = sorted(covered, key=lambda c: -(c[2] or 0))
    assert (first[1:], second[1:]) == ((2, 2), (2, 1))  # sends 3, 5 and 4 of the case
    assert all(r.probability == 0.5 and r.seed is not None for r in pinned)
    assert len({r.seed for r in pinned}) == 2
    tail = pin_workload_rules(
        [FaultRule(fault="status", status=503, nth=2, times=None)],
        seed=3,
        case_id="c",
        intended=intended,
        roster_may_change=False,
    )
    assert sorted((r.nth, r.times) for r in tail) == [(1, None), (2, None)]
    every = FaultRule(fault="status", status=503, times=None)
    named = FaultRule(fault="status", status=503, match={"delivery_id": "d"})
    assert pin_workload_rules(
        [every, named], seed=3, case_id="c", intended=intended, roster_may_change=False
    ) == [every, named]


def test_two_replays_of_a_racing_case_write_the_same_content(tmp_path: Path) -> None:
    """``replay reference-explore --seed 3 --case concurrent_claim`` twice: the same report
    content, the faults' targets included (the race decides only who sent what)."""
    words = ("replay", "reference-explore", "--seed", "3", "--case", "concurrent_claim")
    first, second = (_cli(tmp_path, tmp_path / f"r{n}", *words) for n in (1, 2))
    (case,) = _report(first)["cases"]
    assert {t["fault"] for t in case["fault_targets"]} == {"accept_then_drop", "status"}
    assert "fault_targets" not in case["measured"]
    _assert_same_content(first, second)


def test_the_pick_is_the_seeds_and_the_cases_never_the_order_it_was_given() -> None:
    intended = {"run-1": ("b@x.org", "a@x.org"), "run-0": ("c@x.org", "d@x.org")}
    shuffled = {run: tuple(reversed(d)) for run, d in reversed(intended.items())}
    pick = pinned_delivery(7, "concurrent_claim+provider_5xx", 1, intended, roster_may_change=False)
    assert pick == pinned_delivery(
        7, "concurrent_claim+provider_5xx", 1, shuffled, roster_may_change=False
    )
    picks = {
        tuple(
            pinned_delivery(
                seed, "concurrent_claim+provider_5xx", 1, intended, roster_may_change=False
            ).values()
        )
        for seed in range(40)
    }
    assert len(picks) == 4  # every delivery can be drawn
    # a roster change may drop or respell a run's first destination: never pinned then
    kept = {
        pinned_delivery(seed, "c", 1, intended, roster_may_change=True)["destination"]
        for seed in range(40)
    }
    assert kept == {"b@x.org", "d@x.org"}
    accented = {"run-0": ("a@x.org", "zoé@x.org", "zoe@x.org")}
    kept = {
        pinned_delivery(seed, "c", 1, accented, roster_may_change=True)["destination"]
        for seed in range(40)
    }
    assert kept == {"zoe@x.org"}


def test_a_difference_names_its_field() -> None:
    a = {"cases": [{"id": "x", "landings": [{"detail": "to ann"}]}]}
    b = {"cases": [{"id": "x", "landings": [{"detail": "to bob"}]}]}
    assert first_difference(content(a), content(b)) == (
        "report.cases[0].landings[0].detail: 'to ann' != 'to bob'"
    )
    assert first_difference({"t": [1, 2]}, {"t": [1]}) == "report.t: 2 items != 1"
    # measurements are set aside: the clock, a pid, and what a racing case measured
    c = {"cases": [{"measured": ["timeline"], "timeline": [1], "duration_s": 1.0, "pid": 3}]}
    d = {"cases": [{"measured": ["timeline"], "timeline": [2, 3], "duration_s": 9.0, "pid": 4}]}
    assert first_difference(content(c), content(d)) is None


def _certify_pg(tmp_path: Path, n: int, url: str, *cases: str) -> Path:
    words = ["certify", "--seed", "1", "--db", url]
    for case in cases:
        words += ["--case", case]
    return _cli(tmp_path, tmp_path / f"pg{n}", *words)


def _pg_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"set {PG_ENV} to test PostgreSQL")
    return url


#: a bounded sample of the certify campaign for every CI run: the baseline, the hard case, a
#: recovery that reconciles (the watchdog sees most there)
PG_SAMPLE = ("baseline", "crash@after_provider_accept#1", "crash@before_reconcile#1")


@pytest.mark.postgres
def test_two_certify_runs_on_postgresql_write_the_same_content(tmp_path: Path) -> None:
    url = _pg_url()
    first, second = (_certify_pg(tmp_path, n, url, *PG_SAMPLE) for n in (1, 2))
    _assert_same_content(first, second)


@pytest.mark.postgres
@pytest.mark.slow
def test_two_whole_certify_runs_on_postgresql_write_the_same_content(tmp_path: Path) -> None:
    url = _pg_url()
    first, second = (_certify_pg(tmp_path, n, url) for n in (1, 2))
    # 13 planned (+ crash@accepted.payments#1) and the recovery sample's second crashes
    assert len(_report(first)["cases"]) == 13 + RECOVERY_SAMPLE
    _assert_same_content(first, second)


def _passing(detail: str) -> CaseResult:
    spec = CaseSpec.parse("concurrent_claim+provider_5xx")
    records = [
        StepRecord("concurrent_claim", Landing.LANDED, "w1, w2 held their first claims at once"),
        StepRecord("provider_5xx", Landing.LANDED, detail),
    ]
    return CaseResult(
        spec=spec,
        verdict=Status.PASS,
        invariants={},
        workers=[],
        intended=2,
        accepted=2,
        reached={},
        crash_fired=False,
        notes=[],
        duration_s=1.0,
        replay="",
        step_records=records,
    )


class _Rerun:
    """A campaign whose every rerun lands its provider fault on ``to``."""

    def __init__(self, to: str) -> None:
        self.to = to

    def run(self, spec: CaseSpec, *, slug_prefix: str) -> CaseResult:
        return _passing(f"the provider applied status to 1 request(s); to {self.to}")


def test_a_rerun_that_lands_on_another_recipient_disagrees_and_says_where() -> None:
    """Same verdict, same invariants, another recipient: not the same case (before, any
    rerun with the same verdicts agreed)."""
    first = _passing("the provider applied status to 1 request(s); to ann@x.org")
    same = rerun_sample(_Rerun("ann@x.org"), [first], size=1, seed=1)  # type: ignore[arg-type]
    assert same[0]["agree"] is True
    assert "differs" not in same[0]
    (other,) = rerun_sample(_Rerun("bob@x.org"), [first], size=1, seed=1)  # type: ignore[arg-type]
    assert other["agree"] is False
    assert other["differs"] == (
        "case concurrent_claim+provider_5xx: landings[1].detail:"
        " 'the provider applied status to 1 request(s); to ann@x.org'"
        " != 'the provider applied status to 1 request(s); to bob@x.org'"
    )
