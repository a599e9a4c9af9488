"""The agent's ledger as the harness reads it: its own LangGraph checkpoints (the scenarios'
``ledger = "examples.agents.langgraph_graph.ledger:Checkpoints"``). Glue beside the agent,
never imported by it."""

from typing import ClassVar

from harness.agents import LangGraphCheckpoints


class Checkpoints(LangGraphCheckpoints):
    tools: ClassVar[dict[str, str]] = {"notify": "destination"}  # the tool, and its recipient
