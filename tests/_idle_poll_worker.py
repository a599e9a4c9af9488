"""A poller: it looks at an empty retry table twelve times (commits that change no row),
then claims each job by marking it sent before it posts, all through one line (``step``).
Marking before posting is its bug: a crash after that commit loses the job. The commits of
that line are one discovered point with fifteen hits in two classes (idle polls, claims);
only a crash at a claim shows the loss.
"""

import json
import os
import sqlite3

import requests

WORK = """SELECT r.run_id, r.input_payload, d.destination
          FROM run_requests r JOIN roster d ON d.topic = r.topic
          ORDER BY r.run_id, d.destination"""
TABLE = "(id TEXT PRIMARY KEY, destination TEXT, run_id TEXT, payload TEXT, state TEXT)"


def step(conn, table):
    row = conn.execute(
        f"SELECT id, destination, run_id, payload FROM {table} WHERE state = 'new' LIMIT 1"
    ).fetchone()
    if row is not None:
        conn.execute(f"UPDATE {table} SET state = 'sent' WHERE id = ?", (row[0],))
    conn.commit()  # STEP
    return row


def main():
    conn = sqlite3.connect(os.environ["DATABASE_URL"].removeprefix("sqlite:///"), timeout=30)
    conn.execute(f"CREATE TABLE IF NOT EXISTS jobs {TABLE}")
    conn.execute(f"CREATE TABLE IF NOT EXISTS retries {TABLE}")
    for run_id, payload, destination in conn.execute(WORK).fetchall():
        conn.execute(
            "INSERT OR IGNORE INTO jobs VALUES (?, ?, ?, ?, 'new')",
            (f"{run_id}:{destination}", destination, run_id, payload),
        )
    conn.commit()  # LOAD
    for table in ["retries"] * 12 + ["jobs"] * 3:
        row = step(conn, table)
        if row is None:
            continue
        ident, destination, run_id, payload = row
        requests.post(
            os.environ["WEBHOOK_URL"],
            json={"destination": destination, "run_id": run_id, "order": json.loads(payload)},
            headers={
                "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
                "webhook-id": ident,
            },
            timeout=5,
        ).raise_for_status()


if __name__ == "__main__":
    main()
