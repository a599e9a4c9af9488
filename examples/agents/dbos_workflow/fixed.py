"""Order webhooks as a DBOS workflow, fixed: the step sends a webhook-id DBOS fixes before
the step runs, the workflow id and the step's id in it. A recovered workflow runs the step
again with the same ids, so a second post carries the first one's key and the receiver
(which dedupes on ``webhook-id``, as Standard Webhooks receivers may) does not process it twice.

Settings from its own environment, as naive.py: DATABASE_URL, DBOS_SYSTEM_DATABASE_URL,
WEBHOOK_URL and WEBHOOK_TOKEN.
"""

import json
import os
from urllib.parse import parse_qs, urlsplit

import requests
from dbos import DBOS, SetWorkflowID
from sqlalchemy import create_engine, text

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""


@DBOS.step()
def post_webhook(run_id, destination, order):
    requests.post(
        os.environ["WEBHOOK_URL"],
        json={"destination": destination, "run_id": run_id, "order": order},
        headers={
            "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
            # the same on every run of this step: DBOS recorded the workflow id when the
            # workflow started, and a recovered workflow reaches this step as the same step
            "webhook-id": f"{DBOS.workflow_id}:{DBOS.step_id}",
        },
        timeout=5,
    ).raise_for_status()


@DBOS.workflow()
def deliver_order(run_id, order, destinations):
    for destination in destinations:
        post_webhook(run_id, destination, order)


def dbos_config(url):
    """DBOS in the app's own database; on PostgreSQL, in the app's own schema."""
    config = {"name": "orders", "system_database_url": url, "log_level": "WARNING"}
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
        workflow_id = f"order-{run_id}"
        if DBOS.get_workflow_status(workflow_id) is None:  # not started yet: start it
            with SetWorkflowID(workflow_id):
                handle = DBOS.start_workflow(deliver_order, run_id, order, destinations)
        else:  # started before a restart: done, or pending and recovered by launch()
            handle = DBOS.retrieve_workflow(workflow_id)
        handle.get_result(polling_interval_sec=0.1)


if __name__ == "__main__":
    main()
