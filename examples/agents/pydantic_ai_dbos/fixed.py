"""The Pydantic AI agent made durable with DBOS, fixed: its ``notify`` tool is a DBOS step,
and it sends a ``webhook-id`` that DBOS fixes before the step runs, the workflow id and the
step's id. A workflow recovered after a crash replays the model's recorded answer and the
steps whose outputs DBOS recorded; a step that posted but whose output was not recorded runs
again with the same ids, so the second post carries the first one's key and the receiver
(which dedupes on ``webhook-id``) does not process it twice. The model is a
``FunctionModel``, as in naive.py.

Settings from its own environment, as naive.py: DATABASE_URL, DBOS_SYSTEM_DATABASE_URL,
WEBHOOK_URL and WEBHOOK_TOKEN.
"""

import json
import os
from urllib.parse import parse_qs, urlsplit

import requests
from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from sqlalchemy import create_engine, text

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


@DBOS.step()
def notify(ctx: RunContext[str], destination: str, text: str) -> str:
    """Send ``text`` to ``destination``."""
    requests.post(
        os.environ["WEBHOOK_URL"],
        json={"destination": destination, "run_id": ctx.deps, "text": text},
        headers={
            "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
            # the same on every run of this step: DBOS recorded the workflow id when the
            # workflow started, and a recovered workflow reaches this call as the same step
            "webhook-id": f"{DBOS.workflow_id}:{DBOS.step_id}",
        },
        timeout=5,
    ).raise_for_status()
    return "sent"


def planner(messages, info):
    """The model: one notify call per recipient named in the prompt, then a summary."""
    done = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if done:
        return ModelResponse(parts=[TextPart(f"notified {len(done)} recipient(s)")])
    request = json.loads(messages[0].parts[-1].content)
    return ModelResponse(
        parts=[
            ToolCallPart("notify", {"destination": d, "text": request["text"]})
            for d in request["recipients"]
        ]
    )


agent = Agent(
    FunctionModel(planner),
    name="notifier",
    deps_type=str,
    tools=[notify],
    capabilities=[DBOSDurability(parallel_execution_mode="sequential")],
)


@DBOS.workflow()
async def notify_order(run_id, order, destinations):
    prompt = json.dumps({"recipients": destinations, "text": f"order {json.dumps(order)}"})
    result = await agent.run(prompt, deps=run_id)
    return result.output


def dbos_config(url):
    """DBOS in the app's own database; on PostgreSQL, in the app's own schema."""
    config = {"name": "notifier", "system_database_url": url, "log_level": "WARNING"}
    options = parse_qs(urlsplit(url).query).get("options", [""])[0]
    if options.startswith("-csearch_path="):
        config["dbos_system_schema"] = options.removeprefix("-csearch_path=")
    return config


def main():
    db = create_engine(os.environ["DATABASE_URL"])
    with db.connect() as c:
        work = c.execute(text(WORK)).all()
    orders = {}
    for run_id, payload, destination in work:
        orders.setdefault(run_id, (json.loads(payload), []))[1].append(destination)
    DBOS(config=dbos_config(os.environ["DBOS_SYSTEM_DATABASE_URL"]))
    DBOS.launch()  # DBOS recovers the workflows a crash left pending, by itself
    for run_id, (order, destinations) in orders.items():  # one order at a time
        workflow_id = f"notify-{run_id}"
        if DBOS.get_workflow_status(workflow_id) is None:  # not started yet: start it
            with SetWorkflowID(workflow_id):
                handle = DBOS.start_workflow(notify_order, run_id, order, destinations)
        else:  # started before a restart: done, or pending and recovered by launch()
            handle = DBOS.retrieve_workflow(workflow_id)
        handle.get_result(polling_interval_sec=0.1)


if __name__ == "__main__":
    main()
