"""``crash-harness report X.json`` with no --format writes files and prints their paths: the
1.5 MB HTML page never lands on a terminal unless asked for outright (``--out -``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness import reports as report_module
from harness.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "report_failing.json"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "ci" / "nightly.json"
    path.parent.mkdir()
    shutil.copy(FIXTURE, path)
    return path


def test_no_format_writes_html_md_and_junit_beside_the_json(saved: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(saved)])
    assert result.exit_code == 0, result.output
    data = json.loads(saved.read_text())
    for fmt, suffix in (("html", ".html"), ("md", ".md"), ("junit", ".xml")):
        path = saved.with_suffix(suffix)
        assert path.read_text() == report_module.RENDERERS[fmt](data)
        assert f"{fmt}: {path}" in result.output.splitlines()
    assert "<html" not in result.output.lower()
    assert len(result.output.splitlines()) == 3


def test_report_dir_takes_every_format_json_included(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    result = CliRunner().invoke(main, ["report", str(saved), "--report-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "nightly.html",
        "nightly.json",
        "nightly.md",
        "nightly.xml",
    ]
    assert json.loads((out / "nightly.json").read_text()) == json.loads(saved.read_text())


def test_html_goes_to_standard_output_only_when_asked(saved: Path) -> None:
    """`--out -` is the explicit way; a pipe (not a terminal) also gets it, as before."""
    data = json.loads(saved.read_text())
    result = CliRunner().invoke(main, ["report", str(saved), "--format", "html", "--out", "-"])
    assert result.exit_code == 0, result.output
    assert result.output == report_module.RENDERERS["html"](data)


def test_html_on_a_terminal_becomes_a_file(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.cli import report as _cmd_report

    runner = CliRunner()  # its output is no terminal: stand one in
    monkeypatch.setattr(_cmd_report, "_stdout_is_terminal", lambda: True)
    result = runner.invoke(main, ["report", str(saved), "--format", "html"])
    assert result.exit_code == 0, result.output
    assert result.output == f"html: {saved.with_suffix('.html')}\n"
    assert saved.with_suffix(".html").exists()


def test_out_takes_its_format_from_the_suffix(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "summary.md"
    result = CliRunner().invoke(main, ["report", str(saved), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == report_module.RENDERERS["md"](json.loads(saved.read_text()))
    unknown = CliRunner().invoke(main, ["report", str(saved), "--out", str(tmp_path / "x.txt")])
    assert unknown.exit_code == 2
    assert "give --format" in unknown.output


def test_out_and_report_dir_together_are_refused(saved: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["report", str(saved), "--out", "-", "--report-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "not both" in result.output


@pytest.mark.parametrize(
    "where",
    [["--format", "md", "--report-dir", "/proc/nope"], ["--format", "md", "--out", "/proc/x/r.md"]],
)
def test_an_unwritable_destination_is_one_line_and_exit_2(saved: Path, where: list[str]) -> None:
    """Found by the command-line fuzzer: an unwritable --report-dir was a traceback."""
    result = CliRunner().invoke(main, ["report", str(saved), *where])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "error:" in result.output
    assert "/proc" in result.output
