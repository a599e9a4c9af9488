"""harness.usersystem: a worker with no ledger adapter, the adapter, and what each lets the
checkers decide. End-to-end cases run on SQLite and PostgreSQL (``db_url``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

import pytest
from sqlalchemy import Engine, text

from harness.engine import _db
from harness.engine.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.workload import build_workload, seed_database
from harness.invariants import CHECKERS, EffectRow, Observation, Status, run_all
from harness.systems import System
from harness.usersystem import (
    NOT_JUDGED,
    LedgerAdapter,
    delivery_id_for,
    idempotency_key_for,
    jobs,
    not_judged,
    recognizer_for,
    simple_system,
)
from harness.worker_config import WorkerConfig

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _noop(config: WorkerConfig) -> None:
    """Does nothing (a placeholder worker)."""


def _config(tmp_path: Path) -> WorkerConfig:
    return WorkerConfig(
        db=_db.DatabaseTarget(url=f"sqlite:///{tmp_path / 'case.sqlite'}"),
        provider_url="http://127.0.0.1:9/",
        credential_id="worker",
        credential_secret="s3cret",
        destination_scope="*",
        worker_name="w1",
    )


def _prepared(system: System, config: WorkerConfig, seed: int = 3) -> Engine:
    engine = config.db.engine()
    system.prepare(engine)
    seed_database(engine, build_workload(seed, runs=2, destinations_per_topic=2))
    return engine


@pytest.fixture
def outbox_system() -> System:
    """The examples/outbox worker (post, then mark sent), imported from its folder."""
    sys.path.insert(0, str(EXAMPLES / "outbox"))
    try:
        import outbox_worker

        system = outbox_worker.SYSTEM
    finally:
        sys.path.remove(str(EXAMPLES / "outbox"))
    assert isinstance(system, System)
    return system


def test_identities_are_stable_and_distinct_per_destination() -> None:
    """Ids, keys and recognizers depend only on (run, destination), never on a call."""
    assert delivery_id_for("r1", "a@x") == delivery_id_for("r1", "a@x")
    assert delivery_id_for("r1", "a@x") != delivery_id_for("r1", "b@x")
    assert idempotency_key_for("r1", "a@x") != idempotency_key_for("r2", "a@x")
    assert recognizer_for("r1", "a@x").startswith("ch-")
    assert len(recognizer_for("r1", "a@x")) == 15


def test_jobs_yield_every_intended_send_with_headers(tmp_path: Path) -> None:
    """One job per (run, destination) of the seeded workload, keyed and addressed."""
    system = simple_system(_noop, name="t:S", boundaries=["after_send"])
    config = _config(tmp_path)
    _prepared(system, config).dispose()
    intended = build_workload(3, runs=2, destinations_per_topic=2).intended()
    found = list(jobs(config))
    assert {(j.run_id, j.destination) for j in found} == {
        (run, dest) for run, dests in intended.items() for dest in dests
    }
    job = found[0]
    assert job.url == "http://127.0.0.1:9/v1/messages"
    assert job.headers["Idempotency-Key"] == idempotency_key_for(job.run_id, job.destination)
    assert job.headers["Authorization"] == "Bearer s3cret"
    assert f"[ref {job.recognizer}]" in job.body
    assert job.message["delivery_id"] == job.delivery_id
    assert "s3cret" not in repr(job)


def test_prepare_creates_only_the_intake_tables(tmp_path: Path) -> None:
    """A user's own table may be called ``deliveries``: the reference ledger is not created."""
    made: list[str] = []

    def mine(engine: Engine) -> None:
        made.append("mine")

    system = simple_system(_noop, name="t:S", boundaries=["b"], prepare=mine)
    engine = _prepared(system, _config(tmp_path))
    with engine.connect() as conn:
        tables = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
    engine.dispose()
    assert {"run_requests", "roster"} <= tables
    assert "deliveries" not in tables
    assert made == ["mine"]


@pytest.mark.parametrize(
    ("boundaries", "message"),
    [([], "at least one boundary"), (["a b"], "not a plain name"), (["a", "a"], "twice")],
)
def test_simple_system_refuses_bad_boundaries(boundaries: list[str], message: str) -> None:
    """An empty, malformed or repeated boundary list is an error, not a silent no-op."""
    with pytest.raises(ValueError, match=message):
        simple_system(_noop, name="t:S", boundaries=boundaries)


def test_without_an_adapter_ledger_checks_are_not_judged() -> None:
    """No adapter: ledger-reading checkers answer unknown, tagged; provider ones decide."""
    system = simple_system(_noop, name="t:S", boundaries=["b"])
    snapshot = system.read_ledger(None)  # type: ignore[arg-type]
    checks = run_all(Observation(intended={"r1": ("a@x",)}, ledger=snapshot, effects=()))
    assert checks["exactly_once_effect"].status is Status.PASS
    assert checks["stable_idempotency_key"].status is Status.PASS
    # loss is decided by the provider's log alone: nothing was accepted, so it is lost
    assert checks["no_silent_loss"].status is Status.FAIL
    assert checks["no_silent_loss"].evidence["judged_by"] == "provider log"
    assert checks["liveness"].status is Status.UNKNOWN
    assert NOT_JUDGED in checks["liveness"].summary
    assert not_judged(checks["one_delivery_identity"])
    assert not not_judged(checks["exactly_once_effect"])
    assert snapshot.audit == ()  # outside a checker (timelines, reports) a gap reads as empty
    assert "missing=" in repr(snapshot)


def test_without_an_adapter_an_accepted_delivery_is_not_lost() -> None:
    """The provider-log verdict of no_silent_loss passes once the provider accepted it."""
    system = simple_system(_noop, name="t:S", boundaries=["b"])
    snapshot = system.read_ledger(None)  # type: ignore[arg-type]
    effect = EffectRow(
        seq=1,
        destination="a@x",
        run_id="r1",
        delivery_id="d1",
        idempotency_key="k1",
        outcome="fresh",
    )
    checks = run_all(Observation(intended={"r1": ("a@x",)}, ledger=snapshot, effects=(effect,)))
    assert checks["no_silent_loss"].status is Status.PASS, checks["no_silent_loss"]


class _Adapter(LedgerAdapter):
    deliveries_sql = """
        SELECT run_id, destination, st AS status, k AS key, who AS created_by FROM mine
    """
    state_counts_sql = "SELECT st, COUNT(*) FROM mine GROUP BY st"
    states: ClassVar[dict[str, str]] = {"done": "delivered", "new": "pending"}


def test_an_adapter_maps_the_users_rows(tmp_path: Path) -> None:
    """Rows, statuses and the operator's counts come from the user's own table."""
    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=_Adapter)
    engine = _config(tmp_path).db.engine()
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE mine (run_id, destination, st, k, who)"))
        conn.execute(text("INSERT INTO mine VALUES ('r1', 'a@x', 'done', 'k1', 'w1')"))
        conn.execute(text("INSERT INTO mine VALUES ('r1', 'b@x', 'new', 'k2', 'w2')"))
    snapshot = system.read_ledger(engine)
    engine.dispose()
    rows = {r.destination: r for r in snapshot.deliveries}
    assert rows["a@x"].delivery_status == "delivered"
    assert rows["a@x"].delivery_id == delivery_id_for("r1", "a@x")
    assert rows["b@x"].created_by == "w2"
    assert snapshot.committed_runs == frozenset({"r1"})
    assert snapshot.frozen_destinations == {"r1": ("a@x", "b@x")}
    assert snapshot.state_counts == {"delivered": 1, "pending": 1}
    checks = run_all(Observation(intended={"r1": ("a@x", "b@x")}, ledger=snapshot, effects=()))
    assert not_judged(checks["audit_survives_cleanup"])  # no audit_sql given
    assert checks["no_silent_loss"].status is Status.FAIL  # b@x never settled
    assert checks["exactly_once_effect"].status is Status.FAIL  # delivered, no effect


def test_outbox_worker_duplicates_after_a_crash(outbox_system: System, db_url: str | None) -> None:
    """The plain outbox, no adapter: a crash after posting sends twice, and it is caught."""
    settings = CampaignSettings(
        system=outbox_system,
        seed=2,
        db_url=db_url,
        cases=[CaseSpec(), CaseSpec.parse("crash@after_provider_accept#1")],
        provider_window_s=0,
        provider_faults=(),
        worker_overrides={"max_attempts": 1},
        runs=1,
    )
    baseline, crashed = run_campaign(settings).cases
    assert baseline.invariants["exactly_once_effect"].status is Status.PASS
    assert crashed.invariants["exactly_once_effect"].status is Status.FAIL
    assert crashed.verdict is Status.FAIL
    assert crashed.crash_fired
    blind = {n for n, c in baseline.invariants.items() if not_judged(c)}
    assert "one_delivery_identity" in blind
    assert "no_silent_loss" not in blind  # decided by the provider's log: nothing was lost
    assert baseline.invariants["no_silent_loss"].status is Status.PASS
    assert blind < set(CHECKERS)
