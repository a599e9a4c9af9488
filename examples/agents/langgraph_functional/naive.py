"""The notifier agent (functional API) with a naive ``notify`` task: every run of it is a
new webhook, with a message id of its own. A crash after the receiver accepted one and
before the task's result is saved makes the resumed entrypoint run the task again: the
receiver gets that webhook twice.
"""

import os
import uuid

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
            "webhook-id": f"msg_{uuid.uuid4().hex}",  # a new message on every call
        },
        timeout=5,
    )
    reply.raise_for_status()
    return f"notified {destination}"


if __name__ == "__main__":
    main(notify)
