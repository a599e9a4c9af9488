"""Reports of real campaigns: certify writes four formats that agree, the JSON validates, and
the HTML of a failing mutant looks like a report in a real browser (headless Chromium)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness import systems
from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.reports import load_report, render_html, render_junit, render_markdown, write_reports
from harness.reports._contract import schema_errors
from tests._chromium import inked_share, needs_chromium, png_colours, screenshot

ROOT = Path(__file__).resolve().parent.parent
FAILING_CASES = ("baseline", "crash@after_delivery_enqueue#1", "crash@after_claim#1")


def _certify(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "harness", "certify", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real certify of a mutant (a pass and two failing cases); its report directory."""
    cwd = tmp_path_factory.mktemp("certify")
    case_args = [arg for case in FAILING_CASES for arg in ("--case", case)]
    proc = _certify(
        "--system", "mutant:transcript_rebuild", "--seed", "1", *case_args, "--report-dir", "out",
        cwd=cwd,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "also: out/report.xml (JUnit) and out/report.html" in proc.stdout
    return cwd / "out"


def test_certify_writes_four_formats_from_one_valid_json(failing_run: Path) -> None:
    """report.json validates; report.md/.xml/.html are exactly what the JSON renders to."""
    data = load_report(failing_run / "report.json")
    assert schema_errors(data) == []
    assert data["partial"] is False
    assert [c["id"] for c in data["cases"]] == list(FAILING_CASES)
    assert (failing_run / "report.md").read_text() == render_markdown(data)
    assert (failing_run / "report.xml").read_text() == render_junit(data)
    # the HTML pictures are redrawn here, so compare everything but the SVG bodies
    html = (failing_run / "report.html").read_text()
    assert html.count("<svg") == render_html(data).count("<svg") == 2
    suite = ET.parse(failing_run / "report.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")


def test_failing_cases_carry_a_timeline_of_the_kill_the_restart_and_the_effects(
    failing_run: Path,
) -> None:
    """A failing case's timeline shows w1 killed at its boundary, w2 restarted, duplicates."""
    data = json.loads((failing_run / "report.json").read_text())
    case = next(c for c in data["cases"] if c["id"] == "crash@after_claim#1")
    timeline: list[dict[str, Any]] = case["timeline"]
    kinds = [(e["lane"], e["kind"]) for e in timeline]
    assert (
        kinds.index(("w1", "spawn")) < kinds.index(("w1", "crash")) < kinds.index(("w2", "spawn"))
    )
    crash = next(e for e in timeline if e["kind"] == "crash")
    assert crash["detail"]["boundary"] == "after_claim"
    effects = [e for e in timeline if e["kind"] == "effect"]
    assert sum(1 for e in effects if e["detail"].get("duplicate")) >= 1
    assert case["effects"]["by_outcome"]["fresh"] == case["effects"]["accepted"]
    assert any(e["lane"] == "ledger" and e["label"] == "enqueued" for e in timeline)
    # a passing case carries no timeline (the work dir was the source, and reports stay small)
    assert "timeline" not in data["cases"][0]


def test_report_of_a_real_campaign_validates_on_each_database(
    db_url: str | None, tmp_path: Path
) -> None:
    """write_reports on a real reference campaign gives a valid report on SQLite and PostgreSQL."""
    settings = CampaignSettings(
        system=systems.resolve("reference"),
        seed=4,
        db_url=db_url,
        cases=[CaseSpec.parse("crash@after_provider_accept#1")],
        workdir=tmp_path / "work",
    )
    paths = write_reports(run_campaign(settings), tmp_path / "out")
    data = load_report(paths["json"])
    assert data["database"] == ("postgresql" if db_url else "sqlite")
    assert data["summary"]["passed"] == 1
    assert data["coverage"][0]["boundary"] == "before_result_commit"
    assert any(e["covered"] for e in data["coverage"])
    assert "<svg" not in paths["html"].read_text()  # nothing failed, nothing to draw


def _png_stats(path: Path) -> tuple[tuple[int, int], int, float, bool]:
    """(size, distinct colours, share of non-background pixels, has the failure banner's red)."""
    size, counts = png_colours(path)
    red = any(
        n > 1000 and abs(r - 0xC6) < 12 and abs(g - 0x28) < 12 and abs(b - 0x28) < 12
        for n, (r, g, b) in counts
    )
    return size, len(counts), inked_share(size, counts), red


@needs_chromium
def test_html_report_screenshot_in_headless_chromium(failing_run: Path, tmp_path: Path) -> None:
    """Chromium renders the failing campaign's report.html to a full, coloured, non-blank PNG."""
    png = tmp_path / "report.png"
    page = (failing_run / "report.html").resolve().as_uri()
    stderr = screenshot(page, png, size=(1400, 2000), profile=tmp_path / "profile")
    assert png.exists(), stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 50_000
    size, colours, inked, red = _png_stats(png)
    assert size == (1400, 2000)
    assert colours > 200, colours  # text, the coloured grid, the pictures: not a blank page
    assert inked > 0.05, inked
    assert red  # the failure banner and the failing cells are there
