"""harness.usersystem: a worker with no ledger adapter, the adapter, and what each lets the
checkers decide. End-to-end cases run on SQLite and PostgreSQL (``db_url``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import Engine, text

from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.plan.workload import build_workload, case_intent, seed_database
from harness.engine.results import CaseResult
from harness.engine.store import _db
from harness.errors import BadInputError, SystemDefinitionError, UnknownSystemError
from harness.invariants import CHECKERS, EffectRow, Observation, Status, run_all
from harness.systems import System, resolve
from harness.usersystem import (
    NOT_JUDGED,
    LedgerAdapter,
    delivery_id_for,
    idempotency_key_for,
    jobs,
    not_judged,
    planned_work,
    recognizer_for,
    simple_system,
)
from harness.worker_config import WorkerConfig
from tests import _orders

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
    """A case's database as the harness makes it: prepared, seeded, then the system's own
    rows (its ``prepare`` runs once the work is written)."""
    engine = config.db.engine()
    system.prepare(engine)
    seed_database(engine, build_workload(seed, runs=2, destinations_per_topic=2))
    case_intent(system, build_workload(seed, runs=2, destinations_per_topic=2), config.db)
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
    # no items at all: a restart minting a second one is not ruled out by an empty table
    assert not_judged(checks["no_restart_duplicates"]), checks["no_restart_duplicates"]
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


# -- intent from the user's own data -----------------------------------------------------------


def test_prepare_declares_intent_from_the_users_own_orders(tmp_path: Path) -> None:
    """A prepare that writes its own orders from the planned work and returns (order,
    e-mail) pairs: those are the case's intent, not the workload's runs."""
    config = _config(tmp_path)
    engine = config.db.engine()
    _orders.CORRECT.prepare(engine)
    workload = build_workload(3, runs=2, destinations_per_topic=2)
    seed_database(engine, workload)
    planned = planned_work(engine)
    intended = case_intent(_orders.CORRECT, workload, config.db)
    with engine.connect() as conn:
        orders = conn.execute(text("SELECT order_id, email FROM orders ORDER BY 1")).all()
    engine.dispose()
    assert len(orders) == len(planned) == 4
    assert intended == {o: (e,) for o, e in orders}
    assert not set(intended) & set(workload.intended())  # the shop's ids, not the harness's


def test_intent_query_names_the_intended_deliveries(tmp_path: Path) -> None:
    """``intent=`` as SQL over the user's tables, or as a function of a connection."""

    def tables(engine: Engine) -> None:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE orders (id, email, status)"))
            conn.execute(text("INSERT INTO orders VALUES ('o1', 'a@x', 'new')"))
            conn.execute(text("INSERT INTO orders VALUES ('o2', 'b@x', 'cancelled')"))

    query = "SELECT id AS run_id, email AS destination FROM orders WHERE status = 'new'"
    workload = build_workload(3, runs=2, destinations_per_topic=2)
    for intent in (query, lambda conn: conn.execute(text(query)).all()):
        config = _config(tmp_path / str(id(intent)))
        (tmp_path / str(id(intent))).mkdir()
        system = simple_system(_noop, name="t:S", boundaries=["b"], prepare=tables, intent=intent)
        engine = config.db.engine()
        system.prepare(engine)
        seed_database(engine, workload)
        engine.dispose()
        assert case_intent(system, workload, config.db) == {"o1": ("a@x",)}


@pytest.mark.parametrize(
    ("returned", "intent", "message"),
    [
        ([], None, "is empty"),
        ([("o1",)], None, "expected \\(run_id, destination\\) pairs"),
        ("o1", None, "is a str"),
        ([("o1", "a@x")], "SELECT 1", "declare them once"),
        (None, "SELECT 'o1' AS id, 'a@x' AS email", "expected the columns run_id and destination"),
        (None, "SELECT run_id, destination FROM no_such_table", "query failed"),
    ],
)
def test_a_malformed_intent_is_bad_input(
    tmp_path: Path, returned: Any, intent: str | None, message: str
) -> None:
    """Nothing, a non-pair, both ways at once, or a query with the wrong columns: one line
    naming the system, never a case that intends nothing (and so cannot lose anything)."""
    system = simple_system(
        _noop, name="t:S", boundaries=["b"], prepare=lambda engine: returned, intent=intent
    )
    config = _config(tmp_path)
    engine = config.db.engine()
    system.prepare(engine)
    engine.dispose()
    with pytest.raises(BadInputError, match=message) as caught:
        case_intent(system, build_workload(3), config.db)
    assert "'t:S'" in str(caught.value)


def test_without_declared_intent_the_workload_is_the_intent(tmp_path: Path) -> None:
    """A prepare that returns nothing keeps the workload's intent (as before)."""
    system = simple_system(_noop, name="t:S", boundaries=["b"], prepare=lambda engine: None)
    config = _config(tmp_path)
    workload = build_workload(3, runs=2, destinations_per_topic=2)
    _prepared(system, config).dispose()
    assert case_intent(system, workload, config.db) == workload.intended()


def _orders_campaign(system: System, db_url: str | None, tmp_path: Path) -> list[CaseResult]:
    settings = CampaignSettings(
        system=system, seed=4, db_url=db_url, workdir=tmp_path, provider_faults=(), runs=2
    )
    return list(run_campaign(settings).cases)


def test_orders_worker_declaring_intent_passes_certify(db_url: str | None, tmp_path: Path) -> None:
    """Certify (baseline and a crash after the provider accepted) of a worker whose work is
    its own orders table: every order confirmed is every order intended, so it passes."""
    cases = _orders_campaign(_orders.CORRECT, db_url, tmp_path)
    assert [c.spec.id for c in cases] == [
        "baseline",
        "crash@after_provider_accept#1",
        "crash@accepted.payments#1",  # the provider's far side of the same send
    ]
    for case in cases:
        assert case.verdict is Status.PASS, (case.spec.id, case.invariants, case.notes)
        assert case.intended == case.accepted == 4
        loss = case.invariants["no_silent_loss"]
        assert loss.status is Status.PASS
        assert loss.evidence["intended"] == 4


def test_orders_worker_that_drops_an_order_fails_no_silent_loss(
    db_url: str | None, tmp_path: Path
) -> None:
    """The same worker with an off-by-one drops its last order: no_silent_loss names it."""
    cases = _orders_campaign(_orders.DROPS_ONE, db_url, tmp_path)
    for case in cases:
        assert case.verdict is Status.FAIL
        loss = case.invariants["no_silent_loss"]
        assert loss.status is Status.FAIL
        assert [lost["run_id"] for lost in loss.evidence["lost"]] == ["order-004"]


# -- the ledger adapter refuses what it does not map -------------------------------------------


def _ledger_with(tmp_path: Path, *rows: tuple[str, str, str, str, str | None]) -> Engine:
    engine = _config(tmp_path).db.engine()
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE mine (run_id, destination, st, k, who)"))
        for row in rows:
            conn.execute(
                text("INSERT INTO mine VALUES (:r, :d, :s, :k, :w)"),
                dict(zip("rdskw", row, strict=True)),
            )
    return engine


@pytest.mark.parametrize(
    ("row", "named"),
    [
        (
            ("r1", "b@x", "shipped", "k2", "w1"),
            ["'shipped' (1 row)", "column status", "'done'", "'new'"],
        ),
        (("r1", "b@x", "done", "k2", "order-app"), ["created_by", "'order-app'", "worker_name"]),
        (("r1", "b@x", "done", "k2", None), ["created_by", "NULL"]),
    ],
)
def test_an_unmapped_ledger_value_is_refused_not_judged(
    tmp_path: Path, row: tuple[str, str, str, str, str | None], named: list[str]
) -> None:
    """A status ``states`` does not map, or a made-up ``created_by``: the ledger is refused,
    every checker that reads it answers unknown naming the query, column, value and what is
    mapped; none passes on it, none blames the worker, and it is no blind spot either."""
    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=_Adapter)
    engine = _ledger_with(tmp_path, ("r1", "a@x", "done", "k1", "w1"), row)
    snapshot = system.read_ledger(engine)
    engine.dispose()
    assert snapshot.refused is not None
    for word in ["_Adapter.deliveries_sql", *named]:
        assert word in snapshot.refused
    checks = run_all(Observation(intended={"r1": ("a@x", "b@x")}, ledger=snapshot, effects=()))
    for name in ("one_delivery_identity", "no_restart_duplicates", "states_distinguishable"):
        check = checks[name]
        assert check.status is Status.UNKNOWN, (name, check)
        assert not not_judged(check)  # the case is unknown, not a pass with a blind spot
        assert named[0] in check.summary


class _Transcript(LedgerAdapter):
    """A ledger like an agent's transcript: which call went to whom and whether its result
    is recorded, but no worker's name and no key the worker sends."""

    deliveries_sql = "SELECT run_id, destination, st AS status FROM mine"
    states: ClassVar[dict[str, str]] = {"done": "delivered", "new": "pending"}
    not_given: ClassVar[dict[str, str]] = {
        "created_by": "a transcript names no worker",
        "idempotency_key": "the tool's key is not in the transcript",
    }


def _effect(seq: int, key: str) -> EffectRow:
    return EffectRow(
        seq=seq,
        destination="a@x",
        run_id="r1",
        delivery_id=delivery_id_for("r1", "a@x"),
        idempotency_key=key,
        outcome="fresh",
    )


def test_a_column_the_ledger_cannot_give_is_not_judged_never_passed(tmp_path: Path) -> None:
    """Declared not given, ``created_by`` is no longer refused: the checker that needs it
    (a restart minting a second item) is not judged and says which column and why, where an
    empty creator would have passed it; a key not given is not compared, while the keys the
    provider saw are still judged for stability; the rest of the rows are judged."""
    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=_Transcript)
    engine = _ledger_with(
        tmp_path, ("r1", "a@x", "done", "k1", None), ("r1", "a@x", "new", "k1", None)
    )
    snapshot = system.read_ledger(engine)
    engine.dispose()
    assert snapshot.refused is None, snapshot.refused
    assert {r.created_by for r in snapshot.deliveries} == {""}  # outside a checker: as read
    effects = (_effect(1, "first"), _effect(2, "second"))
    checks = run_all(Observation(intended={"r1": ("a@x",)}, ledger=snapshot, effects=effects))
    duplicates = checks["no_restart_duplicates"]
    assert not_judged(duplicates), duplicates
    assert "created by: a transcript names no worker" in duplicates.summary
    keys = checks["stable_idempotency_key"]
    assert keys.status is Status.FAIL, keys  # two keys for one delivery, seen by the provider
    assert "idempotency key" in str(keys.evidence["not_compared_because"])
    assert checks["exactly_once_effect"].status is Status.FAIL  # two effects, judged


def test_a_column_not_given_must_be_a_column() -> None:
    class Typo(_Transcript):
        not_given: ClassVar[dict[str, str]] = {"creator": "no worker"}

    with pytest.raises(SystemDefinitionError, match=r"not_given names 'creator'.*created_by"):
        simple_system(_noop, name="t:S", boundaries=["b"], ledger=Typo)


def test_an_unmapped_state_count_is_refused(tmp_path: Path) -> None:
    """The operator's GROUP BY query holding an unmapped value is refused the same way."""

    class Counts(_Adapter):
        deliveries_sql = (
            "SELECT run_id, destination, st AS status, who AS created_by FROM mine"
            " WHERE st = 'done'"
        )

    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=Counts)
    engine = _ledger_with(
        tmp_path, ("r1", "a@x", "done", "k1", "w1"), ("r1", "b@x", "lost", "k2", "w1")
    )
    snapshot = system.read_ledger(engine)
    engine.dispose()
    assert snapshot.refused is not None
    assert "state_counts_sql" in snapshot.refused
    assert "'lost'" in snapshot.refused


def test_a_state_mapped_to_no_harness_state_is_refused_at_construction() -> None:
    """``states = {"sent": "deliverd"}`` is bad input where the system is made."""

    class Typo(LedgerAdapter):
        deliveries_sql = "SELECT 1"
        states: ClassVar[dict[str, str]] = {"sent": "deliverd", "new": "pending"}

    with pytest.raises(SystemDefinitionError, match=r"'sent' to 'deliverd'.*pending, claimed"):
        simple_system(_noop, name="t:S", boundaries=["b"], ledger=Typo)


def test_an_unmapped_state_makes_the_case_unknown_with_a_note(tmp_path: Path) -> None:
    """End to end: the orders worker writes ``shipped``, which its adapter does not map. The
    case is unknown (never a pass, never a failure of the worker), its note says why."""
    settings = CampaignSettings(
        system=_orders.UNMAPPED,
        seed=4,
        workdir=tmp_path,
        provider_faults=(),
        runs=2,
        cases=[CaseSpec()],
    )
    (case,) = run_campaign(settings).cases
    assert case.verdict is Status.UNKNOWN, (case.invariants, case.notes)
    assert not [n for n, c in case.invariants.items() if c.status is Status.FAIL]
    (note,) = [n for n in case.notes if "refused" in n]
    assert "OrdersLedger.deliveries_sql column status holds 'shipped' (4 rows)" in note
    assert "it maps 'sent'" in note


def test_smtp_orders_worker_is_counted_by_its_headers(tmp_path: Path) -> None:
    """The SMTP recipe of own-worker.md: AUTH with the credential id and secret on
    ``provider_smtp_port``, ``X-Run-Id``/``X-Delivery-Id`` headers. Every order's mail is
    counted; a crash after the server accepted one and a restart send it again, caught."""
    settings = CampaignSettings(
        system=_orders.MAILS,
        seed=4,
        workdir=tmp_path,
        provider_preset="smtp",
        provider_faults=(),
        runs=2,
    )
    baseline, crashed, held = run_campaign(settings).cases
    assert baseline.verdict is Status.PASS, (baseline.invariants, baseline.notes)
    assert baseline.intended == baseline.accepted == 4
    assert crashed.invariants["exactly_once_effect"].status is Status.FAIL
    # the server's far side: the 250 to the first mail held while the worker is killed
    assert held.spec.id == "crash@accepted.smtp#1"
    assert held.invariants["exactly_once_effect"].status is Status.FAIL, held.notes
    (duplicate,) = crashed.invariants["exactly_once_effect"].evidence["duplicates"]
    assert duplicate["run_id"] == "order-001"


def test_smtp_mail_without_the_headers_is_joined_by_its_recipient(tmp_path: Path) -> None:
    """Without ``X-Run-Id``/``X-Delivery-Id`` a mail names no run; each recipient here is
    one order's, so the harness ties each mail to that order (``joined_by``) instead of
    reading the orders as lost (``tests/test_attribution.py`` has the cases it cannot)."""
    settings = CampaignSettings(
        system=_orders.MAILS_UNATTRIBUTED,
        seed=4,
        workdir=tmp_path,
        provider_preset="smtp",
        provider_faults=(),
        runs=2,
        cases=[CaseSpec()],
    )
    (case,) = run_campaign(settings).cases
    assert case.accepted == 4
    assert case.invariants["no_silent_loss"].status is Status.PASS
    assert case.invariants["exactly_once_effect"].status is Status.PASS


def test_a_module_defining_a_bad_adapter_is_one_line_of_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--system mod:SYSTEM`` whose module maps a state onto no harness state: refused as
    bad input naming the adapter and the value (exit 2 on the command line), no traceback."""
    (tmp_path / "typo_shop.py").write_text(
        "from harness import LedgerAdapter, simple_system\n"
        "class ShopLedger(LedgerAdapter):\n"
        "    deliveries_sql = 'SELECT 1'\n"
        "    states = {'sent': 'deliverd'}\n"
        "SYSTEM = simple_system(lambda c: None, name='typo_shop:SYSTEM', boundaries=['b'],"
        " ledger=ShopLedger)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(UnknownSystemError, match=r"ShopLedger\.states maps 'sent' to 'deliverd'"):
        resolve("typo_shop:SYSTEM")
    sys.modules.pop("typo_shop", None)


def test_an_adapter_query_that_does_not_run_is_named_in_the_refusal(tmp_path: Path) -> None:
    """A typo in the adapter's SQL: unknown with the database's own words, not a bare
    "ledger could not be read"."""

    class Typo(_Adapter):
        deliveries_sql = "SELECT run_id, destination, stat AS status FROM mine"

    system = simple_system(_noop, name="t:S", boundaries=["b"], ledger=Typo)
    engine = _ledger_with(tmp_path, ("r1", "a@x", "done", "k1", "w1"))
    snapshot = system.read_ledger(engine)
    engine.dispose()
    assert snapshot.refused is not None
    assert "a query of Typo failed" in snapshot.refused
    assert "stat" in snapshot.refused
    checks = run_all(Observation(intended={"r1": ("a@x",)}, ledger=snapshot, effects=()))
    assert checks["one_delivery_identity"].status is Status.UNKNOWN
