"""Every report format is rendered from one JSON: the committed fixture of a failing mutant.

The fixture (``tests/fixtures/report_failing.json``) is a trimmed real report of
``mutant:transcript_rebuild`` with seed 1: two passing cases and two failing ones, each
failing one with its recorded timeline.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness import reports as report_module
from harness.cli import main
from harness.engine.store.trace import TraceEvent
from harness.invariants import AuditRow, EffectRow
from harness.reports import (
    ReportError,
    build_timeline,
    load_report,
    render_html,
    render_junit,
    render_markdown,
    schema_errors,
    validate,
)
from harness.reports._contract import redact
from harness.reports._svg import timeline_svg
from harness.reports.html import MAX_DRAWN_CASES

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "report_failing.json"
SVG_NS = "{http://www.w3.org/2000/svg}"
#: a reference to anything outside the page: src/href/url()/@import with a scheme or //host
EXTERNAL = re.compile(
    r"""(?:\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)"""
    r"""|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:@import)""",
    re.IGNORECASE,
)


@pytest.fixture
def fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def _failing(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["cases"] if c["verdict"] == "fail"]


def test_fixture_is_a_valid_v1_report(fixture: dict[str, Any]) -> None:
    """The committed fixture validates against the shipped JSON Schema, as load_report does."""
    assert schema_errors(fixture) == []
    assert load_report(FIXTURE)["system"] == "mutant:transcript_rebuild"
    assert len(_failing(fixture)) == 2
    assert all(c.get("timeline") for c in _failing(fixture))


def test_schema_rejects_a_broken_report_naming_the_field(fixture: dict[str, Any]) -> None:
    """A report with a wrong verdict or a missing summary fails validation, naming where."""
    broken = copy.deepcopy(fixture)
    broken["cases"][0]["verdict"] = "maybe"
    del broken["summary"]
    errors = schema_errors(broken)
    assert any(e.startswith("cases/0/verdict") for e in errors)
    assert any("summary" in e for e in errors)
    with pytest.raises(ReportError, match="cases/0/verdict"):
        validate(broken)


def test_schema_allows_fields_added_later(fixture: dict[str, Any]) -> None:
    """v1 only grows: unknown fields at any level do not make a report invalid."""
    grown = copy.deepcopy(fixture)
    grown["new_top_level"] = {"x": 1}
    grown["cases"][0]["new_case_field"] = [1, 2]
    grown["summary"]["new_count"] = 3
    assert schema_errors(grown) == []


def test_markdown_has_verdict_matrix_failures_replay_and_coverage(fixture: dict[str, Any]) -> None:
    """The Markdown leads with the verdict, then the matrix, each failure with replay, coverage."""
    md = render_markdown(fixture)
    lines = md.splitlines()
    assert lines[0] == "# crash-harness report: `mutant:transcript_rebuild` on sqlite"
    assert "❌ **2 of 4 case(s) violate an invariant**" in md
    assert md.index("violate an invariant") < md.index("## Boundary") < md.index("## Cases")
    header = next(line for line in lines if line.startswith("| boundary | verdict |"))
    for name in fixture["summary"]["invariants_checked"]:
        assert f" {name} |" in header
    rows = [line for line in lines if line.startswith("| `")]
    assert any(row.startswith("| `after_delivery_enqueue#1` | ❌ fail |") for row in rows)
    assert any(row.startswith("| `baseline` | ✅ pass |") for row in rows)
    for case in _failing(fixture):
        assert f"### ❌ `{case['id']}`: fail" in md
        assert case["replay"] in md
    assert "## Coverage: 3/11 boundaries" in md
    assert "partial report" not in md


def test_junit_has_one_testcase_per_case_with_failures_and_evidence(
    fixture: dict[str, Any],
) -> None:
    """JUnit parses back: 4 testcases, 2 failures typed by invariant, evidence as JSON."""
    root = ET.fromstring(render_junit(fixture))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "0")
    cases = suite.findall("testcase")
    assert [tc.get("name") for tc in cases] == [c["id"] for c in fixture["cases"]]
    assert {tc.get("classname") for tc in cases} == {"mutant:transcript_rebuild"}
    failures = [tc.find("failure") for tc in cases if tc.find("failure") is not None]
    assert len(failures) == 2
    for failure in failures:
        assert failure is not None
        assert "no_restart_duplicates" in (failure.get("type") or "").split(",")
        assert "a restarted worker created a second delivery item" in (failure.get("message") or "")
        text = failure.text or ""
        evidence_line = next(line for line in text.splitlines() if line.startswith("evidence: {"))
        assert json.loads(evidence_line.removeprefix("evidence: "))
        assert "replay: crash-harness certify" in text
    passing = next(tc for tc in cases if tc.get("name") == "baseline")
    assert list(passing.iter("failure")) == []


def test_junit_shows_unknown_as_error_unrun_as_skipped_and_gaps_as_failure(
    fixture: dict[str, Any],
) -> None:
    """Undecided cases are <error>, cases a partial run never reached <skipped>, a gap fails."""
    data = copy.deepcopy(fixture)
    case = data["cases"][0]
    case["verdict"] = "unknown"
    case["invariants"]["no_silent_loss"] = {
        "status": "unknown",
        "summary": "no_silent_loss could not decide: the ledger could not be read",
        "evidence": {"traceback": "..."},
    }
    case["notes"] = ["worker w1 (pid 7) hung"]
    data["partial"] = True
    data["plan"]["cases"].append("crash@after_ack#1")
    data["summary"]["boundaries_uncovered"] = ["after_ack"]
    assert schema_errors(data) == []
    suite = ET.fromstring(render_junit(data)).find("testsuite")
    assert suite is not None
    assert suite.get("errors") == "1"
    assert suite.get("skipped") == "1"
    assert suite.get("failures") == "3"
    error = suite.find("testcase[@name='baseline']/error")
    assert error is not None
    assert "could not decide" in (error.get("message") or "")
    assert "hung" in (error.get("message") or "")
    assert suite.find("testcase[@name='crash@after_ack#1']/skipped") is not None
    gap = suite.find("testcase[@name='boundary coverage']/failure")
    assert gap is not None
    assert "after_ack" in (gap.get("message") or "")


def test_junit_survives_control_characters_in_stderr(fixture: dict[str, Any]) -> None:
    """A worker's stderr with bytes XML cannot carry still yields parseable JUnit."""
    data = copy.deepcopy(fixture)
    worker = data["cases"][2]["workers"][0]
    worker["outcome"] = "died"
    worker["stderr_tail"] = "boom\x00\x07\x1b[31m red"
    suite = ET.fromstring(render_junit(data)).find("testsuite")
    assert suite is not None
    assert "boom" in "".join(suite.itertext())


def test_html_is_self_contained_with_a_picture_per_failing_case(fixture: dict[str, Any]) -> None:
    """HTML: a coloured matrix, one inline <svg> per failing case, replay commands, no links out."""
    html = render_html(fixture)
    assert html.startswith("<!doctype html>")
    assert html.count("<svg") == len(_failing(fixture)) == 2
    assert EXTERNAL.search(html) is None, EXTERNAL.search(html)
    assert "<script" not in html
    assert 'class="matrix"' in html
    assert html.count('class="cell fail"') == sum(
        1 for c in fixture["cases"] for r in c["invariants"].values() if r["status"] == "fail"
    )
    for case in _failing(fixture):
        assert case["replay"].replace("'", "&#x27;") in html
        anchor = "case-" + re.sub(r"[^a-z0-9]+", "-", case["id"].lower()).strip("-")
        assert f'id="{anchor}"' in html
    # the pictures say what happened: the kill, the restart, duplicate effects
    assert "SIGKILL at after_delivery_enqueue#1" in html
    assert "duplicate effect" in html
    # unique ids across the page (the pictures have none of their own)
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_html_draws_a_case_without_a_recorded_timeline(fixture: dict[str, Any]) -> None:
    """A failing case whose timeline was not kept still gets a (coarse) picture from its workers."""
    data = copy.deepcopy(fixture)
    for case in data["cases"]:
        case.pop("timeline", None)
    html = render_html(data)
    assert html.count("<svg") == 2
    assert "Coarse timeline from the worker records" in html


def _as_xml(svg: str) -> ET.Element:
    """An inline picture read as an XML document: the namespace an HTML parser would supply."""
    assert svg.startswith("<svg ")
    assert "xmlns" not in svg
    assert "<?xml" not in svg
    return ET.fromstring(svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))


def _texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]


def test_picture_is_well_formed_svg_with_text_labels(fixture: dict[str, Any]) -> None:
    """A picture is one well-formed <svg role="img"> with a size, labels as <text> in a
    sans-serif, the kill and the duplicate effects named, and no ids of its own."""
    first, second = _failing(fixture)
    svg = timeline_svg(first["timeline"], title=first["id"], salt="one")
    root = _as_xml(svg)
    assert root.get("role") == "img"
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    assert width > 500
    assert height > 100
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    assert "sans-serif" in root.get("font-family", "")
    texts = _texts(root)
    assert "SIGKILL at after_delivery_enqueue#1" in texts
    assert "2 duplicate effect(s)" in texts
    assert {"w1", "w2", "harness", "provider", "ledger"} <= set(texts)  # the lane names
    assert {"start", "restart", "completed (exit 0)", "clock_jump"} <= set(texts)
    assert "ms since the case started" in texts
    assert "duplicate effect (2nd+ for one identity)" in texts  # the legend
    assert "ledger: enqueued" in texts
    assert "ledger: review" not in texts  # only kinds the case has
    assert first["id"] in texts  # the title
    assert ' id="' not in svg
    assert "SIGKILL at before_retry#1" in _texts(
        _as_xml(timeline_svg(second["timeline"], title=second["id"]))
    )


def test_picture_of_a_long_case_counts_seconds_and_keeps_labels_inside() -> None:
    """Past 2 s the axis is in seconds; a label near the right edge ends at its mark."""
    events = [
        {"t": 0.0, "lane": "w1", "kind": "spawn", "label": "w1 started", "detail": {}},
        {"t": 4.99, "lane": "w1", "kind": "crash", "label": "SIGKILL at b#1", "detail": {}},
        {"t": 5.0, "lane": "w1", "kind": "exit", "label": "x", "detail": {}},
    ]
    root = _as_xml(timeline_svg(events))
    assert "s since the case started" in _texts(root)
    kill = next(t for t in root.iter(f"{SVG_NS}text") if t.text == "SIGKILL at b#1")
    assert kill.get("text-anchor") == "end"
    assert float(kill.get("x", 0)) <= float(root.get("width", 0))


def test_picture_escapes_what_comes_from_the_report() -> None:
    """Labels, lane names and titles from the JSON are escaped (and stay well-formed XML)."""
    nasty = "<script>alert('&')</script>\x00"
    events = [
        {"t": 0.0, "lane": nasty, "kind": "spawn", "label": "s", "detail": {}},
        {"t": 0.01, "lane": nasty, "kind": "pause", "label": nasty, "detail": {}},
        {"t": 0.02, "lane": "provider", "kind": "effect", "label": nasty, "detail": {}},
    ]
    svg = timeline_svg(events, title=nasty)
    assert "<script" not in svg
    root = _as_xml(svg)
    assert any(t.startswith("<script>alert('&')</script>") for t in _texts(root))


def _many_failing(report: dict[str, Any], total: int) -> dict[str, Any]:
    """The report with its failing cases copied, each under its own id and replay command,
    until ``total`` cases fail (as benchmarks/bench_html.py builds it)."""
    data = copy.deepcopy(report)
    failing = _failing(data)
    n = 0
    while len(_failing(data)) < total:
        source = failing[n % len(failing)]
        n += 1
        case = copy.deepcopy(source)
        case["id"] = f"{source['id'].rsplit('#', 1)[0]}#{n + 1}"
        case["replay"] = source["replay"].replace(source["id"], case["id"])
        data["cases"].append(case)
    return data


def test_html_draws_at_most_max_drawn_cases_and_lists_the_rest(fixture: dict[str, Any]) -> None:
    """51 failing cases: MAX_DRAWN_CASES drawn in full, the rest listed with their replay
    commands and anchors (the matrix links to them), the page under 1 MB (its drawing time is
    benchmarks/bench_html.py's to measure)."""
    data = _many_failing(fixture, 51)
    failing = _failing(data)
    assert len(failing) == 51
    assert len({c["id"] for c in failing}) == 51
    html = render_html(data)
    assert html.count("<svg") == MAX_DRAWN_CASES < 51
    assert html.count("timeline events (without plain boundary hits)") == MAX_DRAWN_CASES
    assert f"{MAX_DRAWN_CASES} of these 51 cases are drawn in full" in html
    assert f"Listed without pictures ({51 - MAX_DRAWN_CASES})" in html
    listed = html[html.index("Listed without pictures") :]
    assert "<svg" not in listed
    for case in failing[MAX_DRAWN_CASES:]:
        assert case["replay"].replace("'", "&#x27;") in listed
        anchor = "case-" + re.sub(r"[^a-z0-9]+", "-", case["id"].lower()).strip("-")
        assert f'<tr id="{anchor}">' in listed
        assert f'href="#{anchor}"' in html
    assert "exactly_once_effect" in listed
    assert len(html.encode()) <= 1_000_000
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_html_draws_without_matplotlib() -> None:
    """The report's pictures need no plotting library: rendered with matplotlib (and numpy,
    PIL) made unimportable, the page still has both pictures, the same as in this process."""
    script = (
        "import sys, json\n"
        "for name in ('matplotlib', 'numpy', 'PIL'):\n"
        "    sys.modules[name] = None  # import raises ImportError\n"
        "from harness.reports import render_html\n"
        f"data = json.load(open({str(FIXTURE)!r}))\n"
        "sys.stdout.write(render_html(data))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("<svg") == 2
    assert proc.stdout == render_html(json.loads(FIXTURE.read_text()))


def test_partial_report_says_so_in_every_format(fixture: dict[str, Any]) -> None:
    """A partial report is marked partial in Markdown and HTML, with the resume command."""
    data = copy.deepcopy(fixture)
    data["partial"] = True
    data["resume"] = "crash-harness certify --resume reports/report.json"
    data["plan"]["cases"].append("crash@after_ack#1")
    data["summary"]["not_run"] = 1
    assert "partial report: 4 of 5 planned case(s) ran" in render_markdown(data)
    assert "crash-harness certify --resume reports/report.json" in render_markdown(data)
    html = render_html(data)
    assert "partial report" in html
    assert "<code>crash-harness certify --resume reports/report.json</code>" in html


@pytest.mark.parametrize("fmt", ["html", "md", "junit", "json"])
def test_report_command_renders_each_format_from_the_json(fmt: str, tmp_path: Path) -> None:
    """`crash-harness report X.json --format F --out P` writes what the renderer makes."""
    out = tmp_path / f"out.{fmt}"
    result = CliRunner().invoke(main, ["report", str(FIXTURE), "--format", fmt, "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(FIXTURE.read_text())
    assert out.read_text() == report_module.RENDERERS[fmt](data)
    if fmt == "json":
        assert json.loads(out.read_text()) == data


def test_report_command_prints_to_stdout_without_out() -> None:
    """Without --out the rendering goes to standard output (here: Markdown)."""
    result = CliRunner().invoke(main, ["report", str(FIXTURE), "--format", "md"])
    assert result.exit_code == 0
    assert result.output.startswith("# crash-harness report: `mutant:transcript_rebuild`")


def test_report_command_refuses_a_file_that_is_not_a_v1_report(tmp_path: Path) -> None:
    """A missing file, non-JSON or a schema violation exits 2 with the reason."""
    runner = CliRunner()
    missing = runner.invoke(main, ["report", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2
    assert "cannot read report" in missing.output
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert "is not JSON" in runner.invoke(main, ["report", str(garbage)]).output
    broken = json.loads(FIXTURE.read_text())
    broken["cases"][1]["effects"]["accepted"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    result = runner.invoke(main, ["report", str(bad), "--format", "junit"])
    assert result.exit_code == 2
    assert "cases/1/effects/accepted" in result.output


def test_build_timeline_merges_trace_effects_and_ledger_on_one_clock() -> None:
    """Trace, provider effects and ledger rows become ordered lanes; duplicates are flagged."""
    t0 = 1_000.0
    trace = [
        TraceEvent(t0, "spawn", "w1", 11, detail={"arms": []}),
        TraceEvent(t0 + 0.01, "hit", "w1", 11, boundary="after_claim", hit=1),
        TraceEvent(t0 + 0.02, "crash", "w1", 11, boundary="after_provider_accept", hit=1),
        TraceEvent(t0 + 0.03, "exit", "w1", 11, detail={"outcome": "crashed_as_planned"}),
        TraceEvent(t0 + 0.04, "clock_jump", "harness", 0, detail={"seconds": 30.0}),
        TraceEvent(t0 + 0.05, "spawn", "w2", 12, detail={"arms": []}),
        TraceEvent(t0 + 0.09, "exit", "w2", 12, detail={"outcome": "completed", "exit_code": 0}),
    ]

    def effect(seq: int, t: float, outcome: str) -> EffectRow:
        return EffectRow(seq, "a@example.org", "run-1", "dlv_1", "ik-1", outcome, received_at=t)

    effects = [
        effect(1, t0 + 0.015, "fresh"),
        effect(2, t0 + 0.06, "deduplicated"),
        effect(3, t0 + 0.07, "expired_then_accepted"),
    ]
    ledger = [
        # stamped by the shared clock: 30 s ahead after the jump
        {"at": t0 + 30.08, "event": "delivered", "delivery_id": "dlv_1", "worker": "w2"},
        {"at": t0 + 0.005, "event": "enqueued", "delivery_id": "dlv_1", "worker": "w1"},
    ]
    timeline = build_timeline(trace, effects, ledger_events=ledger)
    assert timeline[0] == {
        "t": 0.0,
        "lane": "w1",
        "kind": "spawn",
        "label": "w1 started (pid 11)",
        "detail": {"pid": 11, "arms": []},
    }
    assert [e["t"] for e in timeline] == sorted(e["t"] for e in timeline)
    crash = next(e for e in timeline if e["kind"] == "crash")
    assert crash["label"] == "SIGKILL at after_provider_accept#1"
    by_seq = {e["detail"]["seq"]: e for e in timeline if e["kind"] == "effect"}
    assert by_seq[1]["detail"]["duplicate"] is False
    assert "duplicate" not in by_seq[2]["detail"]  # a dedupe is not a new effect
    assert by_seq[3]["detail"]["duplicate"] is True
    assert by_seq[3]["label"] == "expired_then_accepted (duplicate)"
    delivered = next(e for e in timeline if e["lane"] == "ledger" and e["label"] == "delivered")
    assert delivered["t"] == pytest.approx(0.08)  # the jump is taken back out
    assert {e["lane"] for e in timeline} == {"w1", "w2", "harness", "provider", "ledger"}


def test_passwords_in_urls_never_reach_a_report() -> None:
    """Any scheme://user:password@ in any string of a report has its password hidden."""
    data = {
        "replay": "crash-harness certify --db postgresql://app:hunter2@db/x",
        "cases": [{"notes": ["could not reach amqp://u:s3cret@mq:5672/"]}],
    }
    text = json.dumps(redact(data))
    assert "hunter2" not in text
    assert "s3cret" not in text
    assert "postgresql://app:***@db/x" in text


def test_build_timeline_takes_the_campaigns_own_records() -> None:
    """AuditRow/EffectRow dataclasses work as inputs; provider clock moves are taken back out."""
    t0 = 5_000.0
    trace = [
        TraceEvent(t0, "spawn", "w1", 1),
        TraceEvent(t0 + 0.5, "exit", "w1", 1, detail={"outcome": "completed", "exit_code": 0}),
    ]
    # the provider's clock was moved 3600 s (earlier in the campaign) before this effect
    effect = EffectRow(
        7, "a@example.org", "run-1", "dlv_1", "ik-1", "fresh", received_at=t0 + 3600.2
    )
    audit = AuditRow(1, "dlv_1", "run-1", "delivered", "w1", at=t0 + 0.3)
    timeline = build_timeline(
        trace, [effect], ledger_events=[audit], provider_advances=[(t0 - 10, 3600.0)]
    )
    assert [(e["lane"], e["t"]) for e in timeline] == [
        ("w1", 0.0),
        ("provider", pytest.approx(0.2)),
        ("ledger", pytest.approx(0.3)),
        ("w1", 0.5),
    ]
    assert timeline[2]["detail"] == {"delivery_id": "dlv_1", "run_id": "run-1", "worker": "w1"}


def test_no_nan_or_infinity_ever_reaches_report_json() -> None:
    """JSON has no NaN: a non-finite number anywhere (say in a checker's evidence) is written
    as a string, so every strict reader can read the file."""
    from harness.reports import dumps

    text = dumps({"a": float("nan"), "b": [float("inf"), {"c": -float("inf")}], "d": 1.5})

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in report JSON")

    assert json.loads(text, parse_constant=refuse) == {
        "a": "nan",
        "b": ["inf", {"c": "-inf"}],
        "d": 1.5,
    }
