"""The notifier agent (graph API) with a naive tool: every call of ``notify`` is a new
webhook, with a message id of its own. A crash after the receiver accepted one and before
the checkpoint that records the tool's result makes the resumed thread call the tool again:
the receiver gets that webhook twice.
"""

import os
import uuid

import requests
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from examples.agents.langgraph_graph.agent import main


@tool
def notify(destination: str, text: str, config: RunnableConfig) -> str:
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
            "webhook-id": f"msg_{uuid.uuid4().hex}",  # a new message on every call
        },
        timeout=5,
    )
    reply.raise_for_status()
    return f"notified {destination}"


if __name__ == "__main__":
    main([notify])
