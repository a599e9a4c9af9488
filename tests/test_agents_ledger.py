"""An agent's own transcript read as its ledger (``harness.agents``): a LangGraph graph's
``SqliteSaver`` checkpoints, written by a real graph, read back as delivery rows; what the
checkers then judge, and what they say they cannot.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import create_engine

pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the langgraph extra")

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.func import entrypoint, task

from examples.agents.langgraph_graph.agent import build
from examples.agents.scripted_model import prompt
from harness.agents import LangGraphCheckpoints
from harness.invariants import EffectRow, Observation, Status, run_all
from harness.usersystem import delivery_id_for, not_judged, simple_system
from harness.worker_config import WorkerConfig

SENT: list[str] = []


@tool
def notify(destination: str, text: str) -> str:
    """Send a message to one recipient (recorded, not sent)."""
    SENT.append(destination)
    return f"notified {destination}"


class Checkpoints(LangGraphCheckpoints):
    tools: ClassVar[dict[str, str]] = {"notify": "destination"}


def _noop(config: WorkerConfig) -> None:
    """No worker: the rows are written by the graph in the test."""


def _run(db: Path, thread: str, recipients: list[str], **compile_options: Any) -> None:
    conn = sqlite3.connect(f"{db}.checkpoints", check_same_thread=False)
    graph = build([notify], SqliteSaver(conn))
    if compile_options:  # the same graph, stopped where a crash would leave it
        graph = graph.builder.compile(checkpointer=SqliteSaver(conn), **compile_options)
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage(prompt(thread, recipients, "o"))]}, config)
    conn.close()


def _ledger(db: Path) -> Any:
    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=Checkpoints)
    engine = create_engine(f"sqlite:///{db}")
    try:
        return system.read_ledger(engine)
    finally:
        engine.dispose()


def _accepted(run: str, destination: str, seq: int) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination=destination,
        run_id=run,
        delivery_id=delivery_id_for(run, destination),
        idempotency_key=f"k{seq}",
        outcome="fresh",
    )


def test_a_finished_thread_reads_as_delivered_and_holds(tmp_path: Path) -> None:
    db = tmp_path / "case.sqlite"
    _run(db, "run-1", ["a@x", "b@x"])
    ledger = _ledger(db)
    assert ledger.refused is None, ledger.refused
    assert {(r.run_id, r.destination, r.delivery_status) for r in ledger.deliveries} == {
        ("run-1", "a@x", "delivered"),
        ("run-1", "b@x", "delivered"),
    }
    assert ledger.queue == frozenset()
    effects = (_accepted("run-1", "a@x", 1), _accepted("run-1", "b@x", 2))
    intended = {"run-1": ("a@x", "b@x")}
    checks = run_all(Observation(intended=intended, ledger=ledger, effects=effects))
    assert checks["accepted_reconciled_or_unknown"].status is Status.PASS
    # what a transcript cannot hold is said in those words, never passed on an empty value
    for name in ("no_restart_duplicates", "delivered_has_receipt", "one_delivery_identity"):
        assert not_judged(checks[name]), (name, checks[name])
        assert "the agent keeps no delivery record" in checks[name].summary
    assert checks["no_silent_loss"].evidence.get("judged_by") == "provider log"


def test_a_send_the_transcript_holds_no_result_for_fails_when_the_provider_accepted_it(
    tmp_path: Path,
) -> None:
    """The graph stopped after the tool ran and before its result was saved, as a crash
    leaves it: the call is pending in the agent's record (its queue: it will call again),
    while the provider has the message. The agent has lost track of a send."""
    db = tmp_path / "case.sqlite"
    _run(db, "run-1", ["a@x"], interrupt_before=["tools"])
    ledger = _ledger(db)
    [row] = ledger.deliveries
    assert (row.destination, row.delivery_status) == ("a@x", "pending")
    assert ledger.queue == frozenset({row.delivery_id})
    checks = run_all(
        Observation(
            intended={"run-1": ("a@x",)}, ledger=ledger, effects=(_accepted("run-1", "a@x", 1),)
        )
    )
    check = checks["accepted_reconciled_or_unknown"]
    assert check.status is Status.FAIL, check
    assert check.evidence["unreconciled"][0]["ledger_status"] == "pending"


def test_a_graph_that_keeps_no_messages_is_refused_not_read_as_no_send(tmp_path: Path) -> None:
    """A functional-API agent keeps its calls in task results: the adapter cannot read it,
    and says so (the case is unknown), rather than reading "no rows" as "nothing sent"."""
    db = tmp_path / "case.sqlite"
    conn = sqlite3.connect(f"{db}.checkpoints", check_same_thread=False)

    @task
    def send(destination: str) -> str:
        return destination

    @entrypoint(checkpointer=SqliteSaver(conn))
    def agent(recipients: list[str]) -> list[str]:
        return [send(d).result() for d in recipients]

    agent.invoke(["a@x"], {"configurable": {"thread_id": "run-1"}})
    conn.close()
    ledger = _ledger(db)
    assert ledger.refused is not None
    assert "no messages channel" in ledger.refused
    checks = run_all(Observation(intended={"run-1": ("a@x",)}, ledger=ledger, effects=()))
    assert checks["accepted_reconciled_or_unknown"].status is Status.UNKNOWN


def test_the_adapter_is_refused_on_a_database_it_cannot_sit_beside() -> None:
    class Empty(LangGraphCheckpoints):
        pass

    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=Empty)
    engine = create_engine("sqlite://")
    try:
        ledger = system.read_ledger(engine)
    finally:
        engine.dispose()
    assert ledger.refused is not None
    assert "tools is empty" in ledger.refused


def test_a_scenario_names_the_agents_record_inline_without_a_module_of_glue(
    tmp_path: Path,
) -> None:
    """``ledger = { langgraph = { notify = "destination" } }``: one line of the scenario
    instead of a three-line module, read the same way."""
    from harness.engine.plan import scenario as scenario_mod

    path = tmp_path / "agent.toml"
    path.write_text(
        '[scenario]\nsystem = "cmd:true"\nledger = { langgraph = { notify = "destination" } }\n'
    )
    system = scenario_mod.load(path).checked_system()
    db = tmp_path / "case.sqlite"
    _run(db, "run-1", ["a@x"])
    engine = create_engine(f"sqlite:///{db}")
    try:
        ledger = system.read_ledger(engine)
    finally:
        engine.dispose()
    assert ledger.refused is None, ledger.refused
    assert [(r.destination, r.delivery_status) for r in ledger.deliveries] == [("a@x", "delivered")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{ crewai = { notify = "to" } }', r"expected module:attr, or for a cmd: system langgraph"),
        ("{ langgraph = {} }", r"langgraph: expected langgraph = \{ TOOL = ARGUMENT \}"),
        ("{ langgraph = { notify = 1 } }", r"langgraph: expected"),
    ],
)
def test_an_inline_record_the_harness_cannot_read_is_the_ledger_lines_error(
    tmp_path: Path, value: str, expected: str
) -> None:
    from harness.engine.plan import scenario as scenario_mod
    from harness.errors import BadInputError

    path = tmp_path / "agent.toml"
    path.write_text(f'[scenario]\nsystem = "cmd:true"\nledger = {value}\n')
    with pytest.raises(BadInputError, match=rf"agent.toml:3: \[scenario.ledger\] {expected}"):
        scenario_mod.load(path)
