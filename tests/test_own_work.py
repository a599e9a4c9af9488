"""A worker that keeps its own orders and declares no intent touches none of the runs it
would be judged on: it is told so in one line after its dry run, before any case runs, with
how to declare its intent (not a baseline FAIL of ``no_silent_loss`` with a wrong fix); the
same worker with its intent declared is certified as any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests._cli import run_harness

#: an order-confirmation worker: its work is its own ``orders`` rows, made from the roster
#: the harness seeded (so its recipients are real ones), under its own order ids
WORKER = """\
import os

import requests
from sqlalchemy import create_engine, text

db = create_engine(os.environ["DATABASE_URL"])
with db.begin() as c:
    c.execute(text(
        "CREATE TABLE IF NOT EXISTS orders (order_id VARCHAR(40) PRIMARY KEY,"
        " email VARCHAR(200), status VARCHAR(16))"
    ))
    if not c.execute(text("SELECT 1 FROM orders")).first():
        emails = [e for (e,) in c.execute(text("SELECT destination FROM roster ORDER BY 1"))]
        for n, email in enumerate(emails, start=1):
            c.execute(text("INSERT INTO orders VALUES (:o, :e, 'new')"),
                      {"o": f"order-{n:03d}", "e": email})
with db.connect() as c:
    work = c.execute(text("SELECT order_id, email FROM orders WHERE status = 'new'")).all()
for order_id, email in work:
    requests.post(
        os.environ["WEBHOOK_URL"],
        json={"destination": email, "run_id": order_id, "text": "your order"},
        headers={"Authorization": "Bearer " + os.environ["TOKEN"], "webhook-id": order_id},
        timeout=5,
    )
    with db.begin() as c:
        c.execute(text("UPDATE orders SET status = 'sent' WHERE order_id = :o"), {"o": order_id})
"""

#: its intent, declared: the orders it will make, as the harness's prepare makes them first
PREPARE = """\
from sqlalchemy import text


def prepare(engine):
    with engine.begin() as c:
        c.execute(text(
            "CREATE TABLE orders (order_id VARCHAR(40) PRIMARY KEY,"
            " email VARCHAR(200), status VARCHAR(16))"
        ))
        emails = [e for (e,) in c.execute(text("SELECT destination FROM roster ORDER BY 1"))]
        pairs = [(f"order-{n:03d}", e) for n, e in enumerate(emails, start=1)]
        for order_id, email in pairs:
            c.execute(
                text("INSERT INTO orders VALUES (:o, :e, 'new')"), {"o": order_id, "e": email}
            )
    return pairs
"""

SCENARIO = """\
[scenario]
system = "cmd:python own_worker.py"
seed = 4
{extra}

[scenario.env]
DATABASE_URL = "{{db.url}}"
WEBHOOK_URL = "{{provider.url}}/hooks"
TOKEN = "{{provider.credential}}"

[workload]
runs = 1
destinations_per_topic = 2

[provider]
preset = "webhook"
faults = []
"""


def _run(tmp_path: Path, extra: str, *args: str) -> tuple[int, str, dict[str, Any]]:
    (tmp_path / "own_worker.py").write_text(WORKER)
    (tmp_path / "own_prepare.py").write_text(PREPARE)
    (tmp_path / "own.toml").write_text(SCENARIO.format(extra=extra))
    return run_harness(tmp_path, tmp_path, *args, "own.toml", "--determinism", "0")


def test_a_worker_with_its_own_work_and_no_intent_is_told_before_any_case(
    tmp_path: Path,
) -> None:
    status, said, report = _run(tmp_path, "", "sweep")
    assert status == 2, said
    (line,) = [s for s in said.splitlines() if "keeps its own work" in s]
    assert "touched none of the 2 intended deliveries" in line, line
    assert "'order-001', 'order-002'" in line, line
    assert 'prepare = "module:function"' in line, line
    assert "crash@" not in said, said  # no case ran after the dry run
    assert "no_silent_loss" not in said, said
    assert not report.get("cases"), report


def test_the_same_worker_with_its_intent_declared_is_certified(tmp_path: Path) -> None:
    status, said, report = _run(tmp_path, 'prepare = "own_prepare:prepare"', "sweep")
    assert "keeps its own work" not in said, said
    assert report["cases"], said
    baseline = report["cases"][0]
    assert baseline["verdict"] == "pass", baseline
    assert baseline["effects"]["on_intended"] == 4, baseline["effects"]  # every order it made
    assert status in (0, 1), said
