"""Failed, undecided and not judged look different in every report format, and a failure says
what it was about: the duplicated destination, each duplicate linked to the effect it
repeats, and the destination a lost delivery never reached.

Every report here comes from a real campaign: the ``examples/outbox`` worker (a
``simple_system`` with no ledger adapter, so seven invariants are *not judged*) crashed after
its provider accepted, a worker that dies on its own (``no_silent_loss`` *undecided*), and
one that commits and never delivers (``no_silent_loss`` *failed*, a lost destination).
"""

from __future__ import annotations

import copy
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.invariants import fixes
from harness.pytest_plugin import _Tally, tally_line
from harness.reports import (
    load_report,
    render_html,
    render_junit,
    render_markdown,
    summary_of,
    write_reports,
)
from harness.reports._common import headline
from harness.reports._contract import schema_errors
from harness.reports.outcome import Expectation, judge
from harness.systems import System
from tests import _systems

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CRASHED = "crash@after_provider_accept#1"
#: the outbox worker's failures with no ledger adapter: the one real one (retry_within_window
#: leaves a resend on a provider that dedupes nothing to exactly_once_effect)
REAL_FAILURES = ["exactly_once_effect"]


def _outbox_system() -> System:
    sys.path.insert(0, str(EXAMPLES / "outbox"))
    try:
        import outbox_worker

        system = outbox_worker.SYSTEM
    finally:
        sys.path.remove(str(EXAMPLES / "outbox"))
    assert isinstance(system, System)
    return system


def _report(settings: CampaignSettings, out: Path) -> dict[str, Any]:
    data = load_report(write_reports(run_campaign(settings), out)["json"])
    assert schema_errors(data) == []
    return data


@pytest.fixture(scope="module")
def outbox(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The outbox worker without a ledger adapter: a baseline and a crash after the send."""
    tmp = tmp_path_factory.mktemp("outbox")
    settings = CampaignSettings(
        system=_outbox_system(),
        seed=2,
        cases=[CaseSpec(), CaseSpec.parse(CRASHED)],
        provider_window_s=0,
        provider_faults=(),
        worker_overrides={"max_attempts": 1},
        runs=1,
        workdir=tmp / "work",
    )
    return _report(settings, tmp / "out")


@pytest.fixture(scope="module")
def dies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A worker that dies on its own: ``no_silent_loss`` cannot be decided."""
    tmp = tmp_path_factory.mktemp("dies")
    settings = CampaignSettings(
        system=_systems.DIES, seed=3, cases=[CaseSpec()], workdir=tmp / "work"
    )
    return _report(settings, tmp / "out")


@pytest.fixture(scope="module")
def loses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A worker that commits and never delivers: ``no_silent_loss`` fails."""
    tmp = tmp_path_factory.mktemp("loses")
    settings = CampaignSettings(
        system=_systems.LOSES, seed=3, cases=[CaseSpec()], workdir=tmp / "work"
    )
    return _report(settings, tmp / "out")


def _case(report: dict[str, Any], case_id: str) -> dict[str, Any]:
    case: dict[str, Any] = next(c for c in report["cases"] if c["id"] == case_id)
    return case


def _not_judged(case: dict[str, Any]) -> list[str]:
    return [
        n
        for n, r in case["invariants"].items()
        if r["status"] == "unknown" and r["summary"].startswith("[not judged]")
    ]


def _cells(html: str, look: str) -> int:
    return len(re.findall(rf'<td class="cell {look}"', html))


def _svg_titles(html: str) -> Iterator[str]:
    """The plain-text ``<title>`` of each timeline picture."""
    for svg in re.findall(r"<svg .*?</svg>", html, re.DOTALL):
        match = re.search(r"<title>([^<]*)</title>", svg)
        assert match is not None
        yield match.group(1)


def _title_spans(html: str) -> list[tuple[str, str]]:
    """(fill, text) of the coloured pieces of the first picture's visible title."""
    return re.findall(r'<tspan fill="([^"]+)">([^<]*)</tspan>', html)


# -- not judged: grey, never counted among the failures ----------------------------------------


def test_simple_system_not_judged_is_grey_and_the_title_lists_only_real_failures(
    outbox: dict[str, Any],
) -> None:
    """The outbox worker (no ledger adapter) has 1 failure and 10 blind spots (one is
    no_restart_duplicates: no rows to rest a pass on): the HTML grid shows the blind spots
    as grey ○, the case lists them once as not judged, and the timeline's title names the
    failure, never the 10."""
    crashed = _case(outbox, CRASHED)
    blind = _not_judged(crashed)
    assert len(blind) == 10  # the campaign really has what the issue describes
    assert sorted(n for n, r in crashed["invariants"].items() if r["status"] == "fail") == sorted(
        REAL_FAILURES
    )
    html = render_html(outbox)
    assert _cells(html, "not_judged") == 2 * len(blind)  # baseline and crash rows
    assert _cells(html, "fail") == len(REAL_FAILURES)
    assert _cells(html, "undecided") == _cells(html, "unknown") == 0
    assert "td.not_judged, span.not_judged { background: var(--notjudged);" in html
    assert "--notjudged:#b0bec5" in html  # grey, not the undecided yellow nor the failed red
    (title,) = _svg_titles(html)
    assert title == f"{CRASHED}: fail (failed: {', '.join(REAL_FAILURES)}; 10 not judged)"
    for name in blind:
        assert name not in title
    spans = _title_spans(html)
    assert ("#c62828", f" · failed: {', '.join(REAL_FAILURES)}") in spans
    assert ("#757575", " · 10 not judged") in spans
    listed = re.findall(r'<li class="(fail|undecided|not_judged)">', html)
    assert listed == ["fail"] * len(REAL_FAILURES) + ["not_judged"]
    assert "has no ledger adapter" in html.split('<li class="not_judged">', 1)[1].split("</li>")[0]


def test_simple_system_markdown_and_junit_never_count_not_judged_as_failed(
    outbox: dict[str, Any],
) -> None:
    """Markdown gives not judged its own ⚪ and one line; JUnit fails the crashed case on its
    real failure only and keeps the blind spots as a property and a system-out note."""
    blind = _not_judged(_case(outbox, CRASHED))
    md = render_markdown(outbox)
    row = next(line for line in md.splitlines() if line.startswith("| `after_provider_accept#1`"))
    assert row.count("❌") == 1 + len(REAL_FAILURES)  # the verdict and the failed cell
    assert row.count("⚪") == len(blind)
    assert "⚠️" not in row
    assert [line for line in md.splitlines() if line.startswith("- ❌ failed")] == [
        f"- ❌ failed **{n}**: {_case(outbox, CRASHED)['invariants'][n]['summary']}"
        for n in REAL_FAILURES
    ]
    (judged_line,) = [line for line in md.splitlines() if line.startswith("- ⚪ not judged: ")]
    assert "has no ledger adapter" in judged_line
    assert all(f"`{n}`" in judged_line for n in blind)

    suite = ET.fromstring(render_junit(outbox)).find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("1", "0")
    baseline = suite.find("testcase[@name='baseline']")
    assert baseline is not None
    assert baseline.find("failure") is None
    assert baseline.find("error") is None
    crashed = suite.find(f"testcase[@name='{CRASHED}']")
    assert crashed is not None
    failure = crashed.find("failure")
    assert failure is not None
    assert failure.get("type") == ",".join(REAL_FAILURES)
    assert "not judged" not in (failure.get("message") or "")
    assert "(unknown)" not in (failure.text or "")
    prop = crashed.find("properties/property[@name='not_judged']")
    assert prop is not None
    assert (prop.get("value") or "").split(", ") == blind
    assert "not judged (not a failure)" in (crashed.findtext("system-out") or "")


# -- undecided: yellow, its reason, neither failed nor not judged ------------------------------


def test_an_undecided_invariant_looks_unlike_a_failed_one(dies: dict[str, Any]) -> None:
    """A worker that died on its own leaves ``no_silent_loss`` undecided: a yellow ? with the
    reason in HTML, ⚠️ undecided in Markdown, a JUnit error (inconclusive), never a failure."""
    case = dies["cases"][0]
    assert case["verdict"] == "unknown"
    inv = case["invariants"]["no_silent_loss"]
    assert inv["status"] == "unknown"
    assert not inv["summary"].startswith("[not judged]")
    html = render_html(dies)
    assert re.search(r'<td class="cell undecided" title="no_silent_loss: undecided: ', html)
    assert _cells(html, "fail") == _cells(html, "not_judged") == 0
    assert "--unknown:#f9a825" in html  # yellow, not the failed red
    item = re.search(r'<li class="undecided">(.*?)</li>', html)
    assert item is not None
    assert "? undecided" in item.group(1)
    assert "could not decide" in item.group(1)
    assert '<li class="fail">' not in html
    (title,) = _svg_titles(html)
    assert "undecided: no_silent_loss" in title
    assert "failed:" not in title
    assert ("#f57f17", " · undecided: no_silent_loss") in _title_spans(html)

    md = render_markdown(dies)
    assert "- ⚠️ undecided **no_silent_loss**: no_silent_loss could not decide" in md
    assert "- ❌ failed" not in md

    suite = ET.fromstring(render_junit(dies)).find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")
    error = suite.find("testcase/error")
    assert error is not None
    assert "no_silent_loss" in (error.get("message") or "")
    assert "no_silent_loss (undecided)" in (error.text or "")


# -- what a failure was about ------------------------------------------------------------------


def test_timeline_says_which_effect_a_duplicate_repeats(outbox: dict[str, Any]) -> None:
    """The report builder marks each duplicate effect with the seq of the first accepted
    effect of the same run and destination (``detail.repeats``)."""
    effects = [e["detail"] for e in _case(outbox, CRASHED)["timeline"] if e["kind"] == "effect"]
    (dup,) = [d for d in effects if d.get("duplicate")]
    (original,) = [
        d
        for d in effects
        if d.get("nth_accepted") == 1
        and (d["run_id"], d["destination"]) == (dup["run_id"], dup["destination"])
    ]
    assert dup["repeats"] == original["seq"] < dup["seq"]
    assert all("repeats" not in d for d in effects if not d.get("duplicate"))


def test_html_links_a_duplicate_to_an_existing_anchor_of_the_original(
    outbox: dict[str, Any],
) -> None:
    """The failing case's summary names the duplicated destination and links the duplicate
    to the timeline row of the effect it repeats; that row exists and is the original."""
    case = _case(outbox, CRASHED)
    (dup,) = [e["detail"] for e in case["timeline"] if e["detail"].get("duplicate")]
    html = render_html(outbox)
    item = re.search(r'<li class="dups">(.*?)</ul></li>', html, re.DOTALL)
    assert item is not None
    assert f"<b>duplicated</b>: <code>{dup['destination']}</code>" in item.group(1)
    link = re.search(r'<span class="repeats"><a href="#([^"]+)">#(\d+)</a></span>', item.group(1))
    assert link is not None
    target, seq = link.group(1), int(link.group(2))
    assert seq == dup["repeats"]
    row = re.search(rf'<tr id="{re.escape(target)}">(.*?)</tr>', html)
    assert row is not None, f"no element with id {target}"
    assert f"#{seq} fresh → {dup['destination']}" in row.group(1)
    # the duplicate's own row links back to the same anchor
    own = re.search(rf'<tr id="[^"]+-effect-{dup["seq"]}">(.*?)</tr>', html)
    assert own is not None
    assert f'repeats <a href="#{target}">#{seq}</a>' in own.group(1)
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_markdown_and_junit_name_the_duplicated_destination(outbox: dict[str, Any]) -> None:
    """Markdown: ``effect #4 repeats #3 (same destination X, key K...)``; JUnit the same."""
    (dup,) = [
        e["detail"] for e in _case(outbox, CRASHED)["timeline"] if e["detail"].get("duplicate")
    ]
    sentence = (
        f"effect #{dup['seq']} repeats #{dup['repeats']} (same destination {dup['destination']}, "
        f"key {dup['idempotency_key']}"
    )
    md = render_markdown(outbox)
    assert f"- duplicated: `{dup['destination']}`" in md
    assert f"  - {sentence}" in md
    failure = ET.fromstring(render_junit(outbox)).find(f"testsuite/testcase[@name='{CRASHED}']")
    assert failure is not None
    assert sentence in (failure.findtext("failure") or "")


def test_a_lost_delivery_names_the_destination_that_never_got_it(loses: dict[str, Any]) -> None:
    """``no_silent_loss`` failing: every format names each destination that got nothing."""
    case = loses["cases"][0]
    rows = case["invariants"]["no_silent_loss"]["evidence"]["lost"]
    assert rows
    html, md = render_html(loses), render_markdown(loses)
    for row in rows:
        said = f"{row['destination']} (run {row['run_id']}) never got its effect"
        assert f"- lost: {said}" in md
        assert f'<li class="lost"><b>lost</b>: {said}' in html


# -- a pass says how many invariants it judged (#26 item 9) -------------------------------------


def _baseline_only(report: dict[str, Any]) -> dict[str, Any]:
    """The outbox report cut to its passing baseline: a pass with 7 blind spots."""
    data = copy.deepcopy(report)
    data["cases"] = [_case(report, "baseline")]
    data["plan"]["cases"] = ["baseline"]
    data["summary"] = summary_of(data["cases"], [], plan=["baseline"], full=False)
    return data


def test_a_pass_with_blind_spots_says_how_many_invariants_were_judged(
    outbox: dict[str, Any],
) -> None:
    """'all 1 case(s) hold every invariant' was said of a system with no ledger adapter
    while 7 of 13 invariants were never judged: every format now says 6 of 13, and why."""
    data = _baseline_only(outbox)
    blind = _not_judged(data["cases"][0])
    total = len(data["cases"][0]["invariants"])
    said = f"{total - len(blind)} of {total} invariant(s) judged; not judged: "

    outcome = judge(data, Expectation())
    assert outcome.passed
    assert "hold every judged invariant" in outcome.message
    assert said in outcome.message
    assert "has no ledger adapter" in outcome.message

    (not_judged,) = data["summary"]["invariants_not_judged"]
    assert not_judged["invariants"] == blind
    assert "has no ledger adapter" in not_judged["why"]
    assert len(data["summary"]["invariants_judged"]) == total - len(blind)
    assert schema_errors(data) == []

    level, sentence = headline(data)
    assert level == "pass"
    assert sentence.endswith(f"every judged invariant ({total - len(blind)} of {total} judged)")
    md = render_markdown(data)
    assert "hold every invariant" not in md
    (line,) = [x for x in md.splitlines() if x.startswith("Judged: ")]
    assert said in line
    assert all(n in line for n in blind)
    html = render_html(data)
    assert "hold every invariant" not in html
    assert f'<p class="judged">Judged: {said}' in html
    suite = ET.fromstring(render_junit(data)).find("testsuite")
    assert suite is not None
    prop = suite.find("properties/property[@name='judged']")
    assert prop is not None
    assert said in (prop.get("value") or "")

    tally = _Tally(campaigns=1, cases=1, judged_cases=data["cases"])
    assert said in tally_line(tally)


def test_a_pass_with_every_invariant_judged_says_so(outbox: dict[str, Any]) -> None:
    data = _baseline_only(outbox)
    for inv in data["cases"][0]["invariants"].values():
        inv.update(status="pass", summary="holds")
    data["summary"] = summary_of(data["cases"], [], plan=["baseline"], full=False)
    total = len(data["cases"][0]["invariants"])
    outcome = judge(data, Expectation())
    assert outcome.message == "all 1 case(s) hold every invariant"
    assert headline(data) == ("pass", "all 1 case(s) hold every invariant")
    assert f"Judged: all {total} invariant(s) judged" in render_markdown(data)
    assert data["summary"]["invariants_not_judged"] == []


# -- a failure says its usual fix (#26 item 11) -------------------------------------------------


def test_every_format_says_the_fix_of_a_failed_invariant(loses: dict[str, Any]) -> None:
    """``no_silent_loss`` fails: its fix line and its docs link are in the JSON summary, the
    Markdown and HTML lists and the JUnit failure text."""
    name = "no_silent_loss"
    assert name in loses["summary"]["invariants_violated"]
    fix, link = fixes.FIXES[name], fixes.link(name)
    assert loses["summary"]["fixes"][name] == {"fix": fix, "doc": link}
    assert schema_errors(loses) == []
    md = render_markdown(loses)
    assert f"  - fix: {fix} ([{link}]({link}))" in md
    html = render_html(loses)
    (item,) = [i for i in re.findall(r'<li class="fail">(.*?)</li>', html, re.DOTALL) if name in i]
    assert f'<a href="{link}">' in item
    suite = ET.fromstring(render_junit(loses)).find("testsuite")
    assert suite is not None
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert fixes.fix_line(name) in (failure.text or "")
