"""The notifier agent, functional API: an ``@entrypoint`` loop that asks the model (a
``@task``) and runs each tool call it gets (the ``notify`` ``@task`` of ``naive.py`` or
``fixed.py``) until the model answers in plain text.

Settings from the program's own environment, as the graph-API agent's:

- ``DATABASE_URL``: the intake (``run_requests`` joined to ``roster``);
- ``CHECKPOINT_DB``: the SQLite file of LangGraph's ``SqliteSaver``;
- ``LANGGRAPH_DURABILITY``: ``exit``, ``async`` (LangGraph's default) or ``sync``;
- ``WEBHOOK_URL``, ``WEBHOOK_TOKEN``: for the ``notify`` task.

One thread per run (``thread_id`` = the run id). On start-up an unfinished thread (a step
still to run, ``state.tasks``) is resumed the documented way (same ``thread_id``, ``None``
as input): the entrypoint runs again from its top, and each task whose result the
checkpointer holds returns that result instead of running again. A thread with no
checkpoint is started; a finished one is left.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.func import entrypoint, task
from sqlalchemy import create_engine, text

from examples.agents.scripted_model import ScriptedToolCaller, prompt

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


def build(notify: Any, checkpointer: SqliteSaver) -> Any:
    model = ScriptedToolCaller().bind_tools([convert_to_openai_tool(notify.func)])

    @task
    def ask_model(messages: list[BaseMessage]) -> AIMessage:
        return model.invoke(messages)

    @entrypoint(checkpointer=checkpointer)
    def agent(request: str) -> str:
        messages: list[BaseMessage] = [HumanMessage(request)]
        while True:
            reply = ask_model(messages).result()
            messages.append(reply)
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                done = notify(**call["args"]).result()
                messages.append(ToolMessage(done, tool_call_id=call["id"]))

    return agent


def work() -> dict[str, tuple[str, list[str]]]:
    """Each run's order and recipients, from the intake tables."""
    runs: dict[str, tuple[str, list[str]]] = {}
    with create_engine(os.environ["DATABASE_URL"]).connect() as c:
        for run_id, payload, destination in c.execute(text(WORK)):
            runs.setdefault(run_id, (payload, []))[1].append(destination)
    return runs


def main(notify: Any) -> None:
    durability = os.environ.get("LANGGRAPH_DURABILITY", "async")
    conn = sqlite3.connect(os.environ["CHECKPOINT_DB"], check_same_thread=False)
    agent = build(notify, SqliteSaver(conn))
    for run_id, (order, recipients) in work().items():
        config: RunnableConfig = {"configurable": {"thread_id": run_id}}
        state = agent.get_state(config)
        # unfinished: its last checkpoint has a step to run, or one whose tasks ran but whose
        # own checkpoint was not saved (``state.next`` is empty then: every task has a result)
        if state.tasks:
            agent.invoke(None, config, durability=durability)  # resume from the checkpoint
        elif not state.values:  # not started (or, under "exit", nothing saved before a crash)
            agent.invoke(prompt(run_id, recipients, order), config, durability=durability)
