"""``examples/agents/dbos_workflow`` and ``examples/agents/pydantic_ai_dbos``: a DBOS workflow
and a Pydantic AI agent made durable with DBOS, as they ship (no harness import, settings from
their own environment, DBOS checkpointing in the case database), crashed at the sends and
commits the harness discovers in them and at the receiver's far-side point, and recovered by
DBOS itself (``DBOS.launch()``).

The naive programs post with a fresh ``webhook-id`` each time: DBOS steps are at-least-once,
so a crash after the post and before DBOS records the step's output makes the recovered
workflow post again, and the receiver gets it twice. The fixed ones send the workflow id and
the step's id, which a recovered workflow reaches again unchanged, and the receiver dedupes
on them. The default run crashes a few chosen points (after the send, the receiver's k-th
accepted webhook); ``--run-slow`` sweeps every point of each scenario.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from tests._cli import run_harness

pytest.importorskip(
    "dbos", reason="the DBOS examples need the dbos extra: pip install -e '.[dbos]'"
)

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ROOT / "examples" / "agents"
WORKFLOW = AGENTS / "dbos_workflow"
AGENT = AGENTS / "pydantic_ai_dbos"

pytestmark = pytest.mark.timeout(300)


def _needs_pydantic_ai() -> None:
    pytest.importorskip(
        "pydantic_ai.durable_exec.dbos",
        reason="the Pydantic AI example needs the extra: pip install -e '.[pydantic-ai]'",
    )


def _send_line(program: Path) -> int:
    """The line of ``program`` that posts the webhook: the discovered send points' WHERE."""
    (line,) = [
        n for n, text in enumerate(program.read_text().splitlines(), 1) if "requests.post(" in text
    ]
    return line


def _workflow_lines(program: Path) -> set[int]:
    """The lines of ``program``'s ``@DBOS.workflow()`` functions."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(program.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            "DBOS.workflow" in ast.unparse(d) for d in node.decorator_list
        ):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _harness(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    report_dir = tmp_path / f"r{len(list(tmp_path.glob('r*')))}"
    return run_harness(ROOT, tmp_path, *args, report_dir=report_dir)


def _run(tmp_path: Path, scenario: Path, *cases: str) -> tuple[int, str, dict[str, Any]]:
    words = [w for case in cases for w in ("--case", case)]
    return _harness(tmp_path, "run", str(scenario), *words, "--determinism", "0")


def _broken(report: dict[str, Any]) -> dict[str, set[str]]:
    """Each case id -> the invariants it broke (an empty set: it passed)."""
    return {
        c["id"]: {n for n, check in c["invariants"].items() if check["status"] == "fail"}
        for c in report["cases"]
    }


def _case(report: dict[str, Any], case_id: str) -> dict[str, Any]:
    (found,) = [c for c in report["cases"] if c["id"] == case_id]
    return found


def test_the_programs_import_nothing_of_the_harness_nor_the_harness_of_them() -> None:
    """The examples are programs as they ship (a scenario's ``ledger.py`` beside one is glue,
    never imported by it); the harness stays free of both frameworks."""
    for program in sorted(AGENTS.rglob("*.py")):
        if program.name != "ledger.py":
            assert "harness" not in program.read_text(), program
    for source in sorted((ROOT / "harness").rglob("*.py")):
        text = source.read_text()
        assert not re.search(r"^\s*(import|from)\s+(dbos|pydantic_ai)\b", text, re.M), source


def test_a_dbos_step_posts_again_after_a_crash_past_its_send(tmp_path: Path) -> None:
    """naive.py: a crash after the receiver accepted the step's post (the near-side
    ``after_send`` point, or the receiver holding its reply, ``accepted.webhook#1``) and
    before DBOS recorded the step's output: the recovered workflow runs the step again, and
    the receiver processes both posts (``exactly_once_effect``). A crash before the post is
    harmless: the recovered step posts once."""
    send = f"naive.{_send_line(WORKFLOW / 'naive.py')}"
    after, before = f"crash@after_send.{send}#1", f"crash@before_send.{send}#1"
    status, said, report = _run(
        tmp_path, WORKFLOW / "naive.toml", after, "crash@accepted.webhook#1", before
    )
    assert status == 1, said
    broken = _broken(report)
    assert "exactly_once_effect" in broken[after], said
    assert "exactly_once_effect" in broken["crash@accepted.webhook#1"], said
    assert broken[before] == set(), said
    duplicated = _case(report, after)
    assert duplicated["effects"]["accepted"] == duplicated["effects"]["intended"] + 1, duplicated
    assert "replay: crash-harness replay" in said
    # DBOS's own tables are the ledger (naive.toml's ledger line): the workflow's inputs
    # froze the recipients, every step's output is recorded once the workflow is done
    for case_id in (after, before):
        judged = _case(report, case_id)["invariants"]
        assert judged["frozen_destinations"]["status"] == "pass", judged["frozen_destinations"]
        assert judged["one_delivery_identity"]["status"] == "pass", judged


def test_a_dbos_step_keyed_by_workflow_and_step_id_holds(tmp_path: Path) -> None:
    """fixed.py: the same crashes; the recovered step posts again (the receiver sees three
    posts for two recipients) with the key of the first, and the receiver processes it once."""
    send = f"fixed.{_send_line(WORKFLOW / 'fixed.py')}"
    after, far = f"crash@after_send.{send}#1", "crash@accepted.webhook#1"
    status, said, report = _run(tmp_path, WORKFLOW / "fixed.toml", after, far)
    assert status == 0, said
    assert not any(_broken(report).values()), said
    for case_id in (after, far):
        case = _case(report, case_id)
        assert case["boundaries_reached"][f"before_send.{send}"] == 3, case
        assert case["effects"]["accepted"] == case["effects"]["intended"] == 2, case
        # the key read back from DBOS's step record (workflow_id:function_id) is the one
        # the receiver got on both posts
        keys = case["invariants"]["stable_idempotency_key"]
        assert keys["status"] == "pass", keys
        assert keys["evidence"]["compared_with_ledger"] is True, keys


def test_an_agent_tool_outside_a_step_posts_again_for_every_recipient_done(
    tmp_path: Path,
) -> None:
    """pydantic_ai_dbos/naive.py: the notify tool is a plain function, so a recovered workflow
    replays the model's recorded tool calls and runs the tool again for each one. A crash
    after the first post, at the receiver's first accepted webhook, and even *before* the
    second post (the first is already out) duplicates the first notification."""
    _needs_pydantic_ai()
    send = f"naive.{_send_line(AGENT / 'naive.py')}"
    cases = (
        f"crash@after_send.{send}#1",
        "crash@accepted.webhook#1",
        f"crash@before_send.{send}#2",
    )
    status, said, report = _run(tmp_path, AGENT / "naive.toml", *cases)
    assert status == 1, said
    broken = _broken(report)
    for case_id in cases:
        assert "exactly_once_effect" in broken[case_id], (case_id, said)


def test_an_agent_tool_as_a_keyed_dbos_step_holds(tmp_path: Path) -> None:
    """pydantic_ai_dbos/fixed.py: the tool is a DBOS step keyed by workflow and step id. A
    crash before the second post leaves the first step's output recorded, so it is not run
    again; a crash after a post runs that step again, deduplicated by the receiver."""
    _needs_pydantic_ai()
    send = f"fixed.{_send_line(AGENT / 'fixed.py')}"
    after, before = f"crash@after_send.{send}#1", f"crash@before_send.{send}#2"
    status, said, report = _run(
        tmp_path, AGENT / "fixed.toml", after, "crash@accepted.webhook#1", before
    )
    assert status == 0, said
    assert not any(_broken(report).values()), said
    # after the first post: that step runs again (1 + 2 sends); before the second post: the
    # first step's output was recorded, so only the second runs again (2 + 1)
    for case_id in (after, before):
        case = _case(report, case_id)
        assert case["boundaries_reached"][f"before_send.{send}"] == 3, case
        assert case["effects"]["accepted"] == case["effects"]["intended"] == 2, case


def _discovered(said: str) -> set[str]:
    return set(re.findall(r"^\s+((?:before|after)_(?:send|commit)\.\S+)\s+x\d", said, re.M))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("example", "stem"),
    [(WORKFLOW, "naive"), (WORKFLOW, "fixed"), (AGENT, "naive"), (AGENT, "fixed")],
)
def test_every_discovered_point_is_swept(example: Path, stem: str, tmp_path: Path) -> None:
    """The whole sweep of each scenario: naive fails on exactly_once_effect at the after-send
    point and the far-side points and nowhere before a send of the workflow example; fixed
    passes every case. The discovered commits are the program's own calls into DBOS (launch,
    status, start); DBOS's commit of a step's output is named by the program's line where the
    step runs on a thread with the workflow's own frames (the sync workflow), and in DBOS's
    own terms (``dbos.step_output.STEP``) where it runs on a thread of its own (the agent)."""
    if example == AGENT:
        _needs_pydantic_ai()
    status, said, report = _harness(tmp_path, "sweep", str(example / f"{stem}.toml"))
    send = f"{stem}.{_send_line(example / f'{stem}.py')}"
    points = _discovered(said)
    assert {f"before_send.{send}", f"after_send.{send}"} <= points, said
    inside = _workflow_lines(example / f"{stem}.py")
    step_commits = {
        p
        for p in points
        if "commit" in p and p.rsplit(".", 1)[1].isdigit() and int(p.rsplit(".", 1)[1]) in inside
    }
    if example == WORKFLOW:
        assert step_commits, said  # DBOS's step-output commits, from the workflow's thread
    else:
        assert not step_commits, said  # the agent's steps commit from threads of their own
        # ... which the harness names in DBOS's terms: the model request's recorded output
        assert "after_commit.dbos.step_output.request" in points, said
    broken = _broken(report)
    assert all(c["verdict"] in ("pass", "fail") for c in report["cases"]), said
    if stem == "fixed":
        assert status == 0, said
        assert not any(broken.values()), said
        return
    assert status == 1, said
    for k in (1, 2):
        assert "exactly_once_effect" in broken[f"crash@after_send.{send}#{k}"], said
        assert "exactly_once_effect" in broken[f"crash@accepted.webhook#{k}"], said
    assert broken[f"crash@before_send.{send}#1"] == set(), said
