"""The notifier agent (graph API), with the tempting fix: the tool call id as the webhook
id. It holds only where the model's message (and so the id) is durable before the tool
runs: under ``durability="sync"``. See README.md.
"""

import os
from typing import Annotated

import requests
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool

from examples.agents.langgraph_graph.agent import main


@tool
def notify(
    destination: str,
    text: str,
    config: RunnableConfig,
    tool_call_id: Annotated[str, InjectedToolCallId],
) -> str:
    """Send a webhook to one recipient."""
    reply = requests.post(
        os.environ["WEBHOOK_URL"],
        json={
            "destination": destination,
            "run_id": config["configurable"]["thread_id"],
            "text": text,
        },
        headers={
            "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
            "webhook-id": tool_call_id,  # the id the model gave this call
        },
        timeout=5,
    )
    reply.raise_for_status()
    return f"notified {destination}"


if __name__ == "__main__":
    main([notify])
