"""The settle probe of the Huey example: what Huey still holds for this case."""

from __future__ import annotations

import sqlite3

from harness.worker_config import WorkerConfig


def pending(config: WorkerConfig) -> dict[str, int]:
    """Tasks Huey has queued and scheduled in the case's database (0 and 0: settled). A
    task Huey took off its queue and lost in a crash is in neither: the probe cannot see
    it, which is why the harness counts what the receiver got."""
    path = config.db.url.removeprefix("sqlite:///")
    with sqlite3.connect(path, timeout=30) as conn:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        return {
            name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            if name in tables
            else 0
            for name in ("task", "schedule")
        }
