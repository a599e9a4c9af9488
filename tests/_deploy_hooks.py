"""A migration for the deploy tests (``[worker] prepare_next``): it records that it ran,
on the case's own database, between the two versions."""

from __future__ import annotations

from sqlalchemy import text

from harness.worker_config import WorkerConfig


def migrate(config: WorkerConfig) -> None:
    with config.db.engine().begin() as conn:
        conn.execute(text("CREATE TABLE migrated (by TEXT)"))
        conn.execute(text("INSERT INTO migrated VALUES (:by)"), {"by": config.worker_name})
