"""The notifier agent, graph API: ``StateGraph(MessagesState)``, a chat model node, a
``ToolNode``, ``tools_condition`` between them (the ReAct wiring, by hand).

The program reads its settings from its own environment and its work from its own database,
as a service would:

- ``DATABASE_URL``: the intake (``run_requests`` joined to ``roster``: each run, and the
  recipients of its topic);
- ``CHECKPOINT_DB``: the SQLite file of LangGraph's ``SqliteSaver``; or ``CHECKPOINT_URL``:
  a PostgreSQL URL for its ``PostgresSaver`` (tables created on start-up, ``setup()``);
- ``LANGGRAPH_DURABILITY``: ``exit``, ``async`` (LangGraph's default) or ``sync``;
- ``WEBHOOK_URL``, ``WEBHOOK_TOKEN``: for the tool (``naive.py``, ``fixed.py``).

One LangGraph thread per run (``thread_id`` = the run id). On start-up it looks at each
run's thread: one a crash left unfinished (a step still to run, ``state.tasks``) is resumed
the documented way (same ``thread_id``, ``None`` as input), one with no checkpoint is
started, a finished one is left.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from sqlalchemy import create_engine, text

from examples.agents.scripted_model import ScriptedToolCaller, prompt

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


def build(tools: Sequence[BaseTool], checkpointer: BaseCheckpointSaver[Any]) -> Any:
    model = ScriptedToolCaller().bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def work() -> dict[str, tuple[str, list[str]]]:
    """Each run's order and recipients, from the intake tables."""
    runs: dict[str, tuple[str, list[str]]] = {}
    with create_engine(os.environ["DATABASE_URL"]).connect() as c:
        for run_id, payload, destination in c.execute(text(WORK)):
            runs.setdefault(run_id, (payload, []))[1].append(destination)
    return runs


@contextmanager
def checkpointer() -> Iterator[BaseCheckpointSaver[Any]]:
    """``PostgresSaver`` when ``CHECKPOINT_URL`` is given, else ``SqliteSaver`` on
    ``CHECKPOINT_DB``: as LangGraph's docs open each."""
    url = os.environ.get("CHECKPOINT_URL")
    if url:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()  # its tables, once (a no-op when they are there)
            yield saver
        return
    conn = sqlite3.connect(os.environ["CHECKPOINT_DB"], check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def main(tools: Sequence[BaseTool]) -> None:
    with checkpointer() as saver:
        run(tools, saver)


def run(tools: Sequence[BaseTool], saver: BaseCheckpointSaver[Any]) -> None:
    durability = os.environ.get("LANGGRAPH_DURABILITY", "async")
    agent = build(tools, saver)
    for run_id, (order, recipients) in work().items():
        config: RunnableConfig = {"configurable": {"thread_id": run_id}}
        state = agent.get_state(config)
        # unfinished: its last checkpoint has a step to run, or one whose tasks ran but whose
        # own checkpoint was not saved (``state.next`` is empty then: every task has a result)
        if state.tasks:
            agent.invoke(None, config, durability=durability)  # resume from the checkpoint
        elif not state.values:  # not started (or, under "exit", nothing saved before a crash)
            task = HumanMessage(prompt(run_id, recipients, order))
            agent.invoke({"messages": [task]}, config, durability=durability)
