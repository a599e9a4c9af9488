"""The notifier agent (graph API), fixed: the tool sends one webhook id per (run,
recipient), and the receiver (Standard Webhooks) processes an id once. The id is built from
what was durable before the agent started: the run id (the thread id) and the recipient,
both rows of the intake. A resumed thread, or one started over, that calls the tool again
sends the same id, and the receiver acknowledges the repeat without processing it.

Why not the tool call id the model gave? It is durable before the tool runs only under
``durability="sync"``: under ``"async"`` the checkpoint holding the model's message may still
be on its way when the tool posts, and under ``"exit"`` nothing is saved until the run ends;
a restarted thread then asks the model again and gets a new id (README.md shows both).
"""

import os

import requests
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from examples.agents.langgraph_graph.agent import main


@tool
def notify(destination: str, text: str, config: RunnableConfig) -> str:
    """Send a webhook to one recipient."""
    run_id = config["configurable"]["thread_id"]
    reply = requests.post(
        os.environ["WEBHOOK_URL"],
        json={"destination": destination, "run_id": run_id, "text": text},
        headers={
            "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
            "webhook-id": f"{run_id}:{destination}",  # the same on every call for this pair
        },
        timeout=5,
    )
    reply.raise_for_status()
    return f"notified {destination}"


if __name__ == "__main__":
    main([notify])
