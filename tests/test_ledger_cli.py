"""``crash-harness ledger status|resolve`` against a real reference ledger (SQLite, PostgreSQL).

The ledger is built with the reference ``Ledger`` API: six deliveries, one in each state an
operator must tell apart, with their times two hours in the past so ages and overdue-ness are
decided by the data, not by waiting.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from harness.cli import main
from harness.engine.plan.workload import build_workload, seed_database
from harness.engine.store import _db
from harness.reference.ledger import Ledger
from harness.reference.schema import AuditEvent, Base, Delivery, QueueItem
from harness.worker_config import WorkerConfig


@dataclass
class Built:
    url: str
    schema: str | None
    ids: dict[str, str]  # intended state -> delivery id

    def args(self) -> list[str]:
        return ["--db", self.url] + (["--schema", self.schema] if self.schema else [])


def _populate(target: _db.DatabaseTarget) -> dict[str, str]:
    engine = target.engine()
    try:
        Base.metadata.create_all(engine)
        seed_database(engine, build_workload(1))
        config = WorkerConfig(
            db=target,
            provider_url="http://127.0.0.1:9",
            credential_id="worker",
            credential_secret="not-used",
            destination_scope="*",
            worker_name="w1",
        )
        then = time.time() - 7200
        ledger = Ledger(engine, config, clock=lambda: then)
        for run in ledger.pending_runs():
            dests = ledger.resolve_destinations(run.topic)
            ledger.commit_result(run, step_id="compose", result_body="hi", destinations=dests)
            ledger.enqueue_deliveries(run.run_id)
        claims = [ledger.claim_next() for _ in range(5)]
        assert all(c is not None for c in claims)
        delivered, failed, unknown, review, claimed = (c for c in claims if c is not None)
        ledger.record_attempt(delivered)
        ledger.persist_accepted(delivered, "msg_1", how="accepted")
        ledger.acknowledge(delivered)
        ledger.cleanup(delivered.delivery_id)
        ledger.persist_terminal(failed, "failed", "refused by the provider")
        ledger.cleanup(failed.delivery_id)
        ledger.record_attempt(unknown)
        ledger.persist_unknown(unknown, "timeout after 5s", retry_in=60.0)
        ledger.persist_terminal(review, "review", "key window passed; resend unsafe")
        with Session(engine) as s, s.begin():
            pending = s.scalars(
                select(Delivery.delivery_id).where(Delivery.delivery_status == "pending")
            ).one()
            # due 5 s ago: inside a 60 s grace, outside a 1 s one
            s.execute(
                update(Delivery)
                .where(Delivery.delivery_id == pending)
                .values(next_attempt_at=time.time() - 5)
            )
    finally:
        engine.dispose()
    return {
        "delivered": delivered.delivery_id,
        "failed": failed.delivery_id,
        "unknown": unknown.delivery_id,
        "review": review.delivery_id,
        "claimed": claimed.delivery_id,
        "pending": pending,
    }


@pytest.fixture
def built(db_url: str | None, tmp_path: Path) -> Iterator[Built]:
    """A populated ledger: a SQLite file, or a fresh schema in the PostgreSQL test database."""
    target = _db.new_target(
        _db.normalise_url(db_url) if db_url else None, workdir=tmp_path, case_slug="ledger_cli"
    )
    try:
        ids = _populate(target)
        yield Built(url=target.url, schema=target.schema, ids=ids)
    finally:
        _db.drop_target(target)


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _row(b: Built, delivery_id: str) -> tuple[Delivery, list[AuditEvent], bool]:
    engine = _db.open_engine(b.url, schema=b.schema)
    try:
        with Session(engine) as s:
            row = s.get(Delivery, delivery_id)
            assert row is not None
            events = list(
                s.scalars(
                    select(AuditEvent)
                    .where(AuditEvent.delivery_id == delivery_id)
                    .order_by(AuditEvent.event_id)
                )
            )
            queued = s.get(QueueItem, delivery_id) is not None
            s.expunge_all()
            return row, events, queued
    finally:
        engine.dispose()


def test_status_counts_every_state_and_flags_overdue(built: Built) -> None:
    """--json: one delivery per state with ages; the stale unknown and lapsed claim are overdue."""
    code, out = _invoke("ledger", "status", *built.args(), "--json", "--all")
    assert code == 0, out
    data = json.loads(out)
    assert data["total"] == 6
    assert {k: v["count"] for k, v in data["states"].items()} == {
        "pending": 1,
        "claimed": 1,
        "delivered": 1,
        "failed": 1,
        "unknown": 1,
        "review": 1,
    }
    assert data["states"]["review"]["oldest_age_s"] > 7100  # made 2 h ago; later is older
    overdue = {d["delivery_id"] for d in data["deliveries"] if d["overdue"]}
    assert overdue == {built.ids["unknown"], built.ids["claimed"]}
    assert data["overdue"]["count"] == 2
    assert data["deliveries"][0]["overdue"]  # overdue items are listed first


def test_status_grace_decides_when_pending_is_overdue(built: Built) -> None:
    """A pending item due 5 s ago is fine with the default 60 s grace, overdue with --grace 1."""
    _, out = _invoke("ledger", "status", *built.args(), "--json", "--grace", "1")
    data = json.loads(out)
    assert data["overdue"]["count"] == 3
    # without --all only what needs attention is listed: overdue, unknown, review
    assert {d["delivery_id"] for d in data["deliveries"]} == {
        built.ids["pending"],
        built.ids["unknown"],
        built.ids["claimed"],
        built.ids["review"],
    }


def test_status_table_shows_states_and_the_items_needing_attention(built: Built) -> None:
    """The default tables list each state's count and the review/unknown/overdue items by id."""
    code, out = _invoke("ledger", "status", *built.args())
    assert code == 0, out
    for state in ("pending", "claimed", "delivered", "failed", "unknown", "review", "overdue"):
        assert state in out
    assert "needs attention" in out
    for key in ("review", "unknown", "claimed"):
        assert built.ids[key] in out
    assert built.ids["delivered"] not in out
    assert "key window passed; resend unsafe" in out
    assert "crash-harness ledger resolve DELIVERY_ID" in out


def test_resolve_review_as_delivered_is_audited(built: Built) -> None:
    """Resolving a review item settles it, fences old leases, drops its queue item, audits why."""
    target = built.ids["review"]
    before, _, queued_before = _row(built, target)
    assert queued_before
    code, out = _invoke(
        "ledger", "resolve", target, "--as", "delivered", "--note", "seen in the provider UI",
        *built.args(), "--operator", "alice",
    )  # fmt: skip
    assert code == 0, out
    assert f"{target}: review -> delivered (resolved by alice" in out
    row, events, queued = _row(built, target)
    assert row.delivery_status == "delivered"
    assert row.acknowledged_at is not None
    assert row.lease_epoch == before.lease_epoch + 1
    assert not queued
    last = events[-1]
    assert last.event == "resolved_by_operator"
    assert last.worker == "alice"
    assert json.loads(last.detail or "{}") == {
        "operator": "alice",
        "note": "seen in the provider UI",
        "previous_state": "review",
        "resolved_as": "delivered",
        "queue_item_removed": True,
    }
    # and the status view now counts it as delivered
    _, status = _invoke("ledger", "status", *built.args(), "--json")
    assert json.loads(status)["states"]["review"]["count"] == 0


def test_resolve_unknown_as_failed(built: Built) -> None:
    """An unknown delivery can be settled as failed; the audit names the previous state."""
    target = built.ids["unknown"]
    code, out = _invoke(
        "ledger", "resolve", target, "--as", "failed", "--note", "provider has no record",
        *built.args(), "--operator", "bob",
    )  # fmt: skip
    assert code == 0, out
    row, events, _ = _row(built, target)
    assert row.delivery_status == "failed"
    assert json.loads(events[-1].detail or "{}")["previous_state"] == "unknown"


@pytest.mark.parametrize("state", ["delivered", "failed", "pending", "claimed"])
def test_resolve_refuses_other_states_naming_the_state(built: Built, state: str) -> None:
    """Only review/unknown items may be resolved; anything else exits 2 and changes nothing."""
    target = built.ids[state]
    before, events_before, _ = _row(built, target)
    code, out = _invoke(
        "ledger", "resolve", target, "--as", "delivered", "--note", "x", *built.args()
    )
    assert code == 2
    assert f"delivery {target} is {state!r}" in out
    assert "only resolve a delivery in review or unknown" in out
    after, events_after, _ = _row(built, target)
    assert after.delivery_status == before.delivery_status
    assert len(events_after) == len(events_before)


def test_resolve_unknown_id_exits_2(built: Built) -> None:
    """An id that is not in the ledger is bad input, named in the message."""
    code, out = _invoke(
        "ledger", "resolve", "dlv_nope", "--as", "failed", "--note", "x", *built.args()
    )
    assert code == 2
    assert "no delivery 'dlv_nope'" in out


def test_unreachable_or_missing_ledger_exits_2(tmp_path: Path) -> None:
    """No such SQLite file, a server nobody listens on, a database without the ledger: exit 2."""
    code, out = _invoke("ledger", "status", "--db", f"sqlite:///{tmp_path / 'missing.db'}")
    assert code == 2
    assert "no SQLite ledger file" in out
    assert not (tmp_path / "missing.db").exists()  # looking did not create it
    code, out = _invoke(
        "ledger", "status", "--db", "postgresql://postgres:hunter2@127.0.0.1:1/nothing"
    )
    assert code == 2
    assert "cannot connect" in out
    assert "hunter2" not in out
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    code, out = _invoke("ledger", "resolve", "x", "--as", "failed", "--note", "n", "--db",
                        f"sqlite:///{empty}")  # fmt: skip
    assert code == 2
    assert "no delivery ledger (table 'deliveries')" in out
