"""The notifier agent (functional API), fixed: the ``notify`` task sends one webhook id per
(run, recipient), and the receiver (Standard Webhooks) processes an id once. The id is built
from what was durable before the agent started: the run id (the thread id) and the
recipient, both rows of the intake. A resumed entrypoint, or one started over, that runs the
task again sends the same id, and the receiver acknowledges the repeat without processing
it.

Why not the tool call id the model gave? The model's reply is a task result, saved with the
checkpointer's ``put_writes`` in the background under every durability mode (``"sync"``
waits for the checkpoint at the end of a step, and the whole entrypoint is one step), and
not at all before the run ends under ``"exit"``: a restarted entrypoint may ask the model
again and get new ids (README.md).
"""

import os

import requests
from langgraph.config import get_config
from langgraph.func import task

from examples.agents.langgraph_functional.agent import main


@task
def notify(destination: str, text: str) -> str:
    """Send a webhook to one recipient."""
    run_id = get_config()["configurable"]["thread_id"]
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
    main(notify)
