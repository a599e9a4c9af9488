"""A program that reads its work from a table of its own (``announcements``), not from the
harness's intake: what an agent as it ships does. Each row is one message, its id the
run, posted with its id and recipient as the webhook id. It creates nothing: the table is
the scenario's to fill (``[scenario] prepare_sql``)."""

import os

import requests
from sqlalchemy import create_engine, text


def main() -> None:
    db = create_engine(os.environ["DATABASE_URL"])
    with db.connect() as c:
        work = c.execute(text("SELECT id, recipient, body FROM announcements ORDER BY id")).all()
    for ann_id, recipient, body in work:
        requests.post(
            os.environ["WEBHOOK_URL"],
            json={"destination": recipient, "run_id": ann_id, "text": body},
            headers={
                "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
                "webhook-id": f"{ann_id}:{recipient}",
            },
            timeout=5,
        ).raise_for_status()


if __name__ == "__main__":
    main()
