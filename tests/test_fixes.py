"""Every failed invariant says its usual fix and links its section (#26 item 11): one table
(``harness.invariants.fixes``), every invariant in it, every link to a heading that exists.

Quick: no campaign runs here; the report formats are checked on a real failure in
``test_report_looks``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli.scenario import print_case
from harness.invariants import CHECKERS, fixes
from harness.pytest_plugin import _case_lines
from tests.test_one_look import _case

ROOT = Path(__file__).resolve().parent.parent


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation other than
    ``-`` and ``_`` dropped, spaces as ``-``."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("name", list(CHECKERS))
def test_every_invariant_has_a_fix_line_and_a_section(name: str) -> None:
    fix = fixes.FIXES.get(name)
    assert fix, f"{name} has no fix line in harness/invariants/fixes.py"
    assert "\n" not in fix
    doc, _, anchor = fixes.link(name).partition("#")
    assert anchor in _anchors((ROOT / doc).read_text(encoding="utf-8")), (
        f"{fixes.link(name)}: no such heading"
    )


def test_the_table_names_no_invariant_that_does_not_exist() -> None:
    assert set(fixes.FIXES) <= set(CHECKERS)


def test_the_console_line_of_a_failed_case_says_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_case(_case())
    out = capsys.readouterr().out
    assert f"exactly_once_effect {fixes.fix_line('exactly_once_effect')}" in out
    assert "docs/invariants.md#exactly_once_effect" in out
    assert "#no_silent_loss" not in out  # undecided: no fix to give


def test_the_pytest_failure_says_the_fix_of_a_failed_invariant_only() -> None:
    lines = list(_case_lines(_case(), ["exactly_once_effect", "no_silent_loss"]))
    at = lines.index(next(x for x in lines if x.startswith("  exactly_once_effect (failed)")))
    assert lines[at + 1] == f"    {fixes.fix_line('exactly_once_effect')}"
    assert not any("#no_silent_loss" in x for x in lines)


def test_an_agent_is_told_the_fix_in_its_own_terms(capsys: pytest.CaptureFixture[str]) -> None:
    """A case that reached a framework's named commit ran an agent: its fix line speaks of
    the tool's key and the receiver (docs/agents.md), not of a ledger row and a transaction;
    an outbox worker's case keeps the outbox advice."""
    from dataclasses import replace

    agent = replace(_case(), reached={"after_commit.langgraph.writes.tools": 2})
    assert fixes.is_agent(agent.reached)
    assert not fixes.is_agent(_case().reached)
    print_case(agent)
    out = capsys.readouterr().out
    said = fixes.fix_line("exactly_once_effect", agent=True)
    assert said is not None
    assert f"exactly_once_effect {said}" in out
    assert "tool call id" in out
    assert "stored idempotency key" not in out
    assert "docs/agents.md" in out
    for name in fixes.AGENT_FIXES:
        assert fixes.AGENT_FIXES[name] != fixes.FIXES[name]
    lines = list(_case_lines(agent, ["exactly_once_effect"]))
    assert any("tool call id" in line for line in lines), lines
