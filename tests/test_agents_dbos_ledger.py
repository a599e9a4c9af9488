"""``harness.agents.dbos.DBOSSteps``: DBOS's workflow and step records read as a ledger.

The tables here are DBOS's columns as DBOS 3 writes them, the inputs serialized by DBOS's
own serializers; the examples' sweeps (tests/test_example_agents_dbos.py) read the tables a
real DBOS program wrote. Each reading has a case where it gives a state and one where it
refuses: a pickle that names a class, a mapping that does not fit the steps recorded.
"""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text

from harness.agents.dbos import DBOSSteps
from harness.usersystem import LedgerRefusedError, delivery_id_for

_TABLES = (
    "CREATE TABLE workflow_status (workflow_uuid TEXT PRIMARY KEY, status TEXT, name TEXT,"
    " inputs TEXT, serialization TEXT)",
    "CREATE TABLE workflow_input (workflow_uuid TEXT PRIMARY KEY, inputs TEXT)",
    "CREATE TABLE operation_outputs (workflow_uuid TEXT, function_id INTEGER,"
    " function_name TEXT, output TEXT, error TEXT, PRIMARY KEY (workflow_uuid, function_id))",
)

Steps = DBOSSteps.from_inline(
    {"workflow": "deliver_order", "step": "post_webhook", "run": 0, "recipients": 2}
)
KeyedSteps = DBOSSteps.from_inline(
    {
        "workflow": "deliver_order",
        "step": "post_webhook",
        "run": "run_id",
        "recipients": "to",
        "key": "step_id",
    }
)


def _pickled(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Inputs as DBOS's default serializer writes them (base64 of a pickle)."""
    dbos = pytest.importorskip("dbos._serialization")
    return str(dbos.DefaultSerializer().serialize({"args": args, "kwargs": kwargs}))


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    engine = create_engine(f"sqlite:///{tmp_path / 'case.sqlite'}")
    with engine.begin() as c:
        for statement in _TABLES:
            c.exec_driver_sql(statement)
    with engine.begin() as c:
        yield c
    engine.dispose()


def _workflow(
    conn: Connection, wf: str, inputs: str, serialization: str = "py_pickle", *, apart: bool = False
) -> None:
    conn.execute(
        text("INSERT INTO workflow_status VALUES (:wf, 'PENDING', 'deliver_order', :i, :s)"),
        {"wf": wf, "i": None if apart else inputs, "s": serialization},
    )
    if apart:  # DBOS 3 keeps inputs in a table of their own
        conn.execute(text("INSERT INTO workflow_input VALUES (:wf, :i)"), {"wf": wf, "i": inputs})


def _step(
    conn: Connection, wf: str, fid: int, name: str = "post_webhook", error: str | None = None
) -> None:
    conn.execute(
        text("INSERT INTO operation_outputs VALUES (:wf, :fid, :name, 'gASVAQ==', :e)"),
        {"wf": wf, "fid": fid, "name": name, "e": error},
    )


def _states(rows: list[Any]) -> dict[str, str]:
    return {r["destination"]: r["status"] for r in rows}


def test_each_recipient_takes_the_state_of_its_step_in_order(conn: Connection) -> None:
    """The k-th post_webhook step serves the k-th recipient: recorded is delivered, recorded
    with an error failed, not recorded pending (the recovered workflow runs it); another
    step's record in between does not shift them."""
    _workflow(conn, "order-r1", _pickled(("r1", {"sku": 1}, ["a", "b", "c"]), {}))
    _step(conn, "order-r1", 1)
    _step(conn, "order-r1", 2, name="log_progress")
    _step(conn, "order-r1", 3, error="gASV...")
    rows = Steps().deliveries(conn)
    assert _states(rows) == {"a": "delivered", "b": "failed", "c": "pending"}
    assert {r["delivery_id"] for r in rows} == {delivery_id_for("r1", d) for d in "abc"}
    assert {r["run_id"] for r in rows} == {"r1"}
    assert Steps().queue(conn) == [delivery_id_for("r1", "c")]
    assert Steps().committed_runs(conn) == ["r1"]
    assert Steps().frozen_destinations(conn) == [{"run_id": "r1", "destination": d} for d in "abc"]
    assert all(r["key"] == "" for r in rows)


def test_portable_json_inputs_keywords_and_the_step_id_as_key(conn: Connection) -> None:
    """Inputs in DBOS's portable JSON, in the workflow_input table, arguments by keyword;
    the key read back is workflow_id:function_id, as ``DBOS.step_id`` gives it."""
    portable = json.dumps({"positionalArgs": [], "namedArgs": {"run_id": "r2", "to": "x"}})
    _workflow(conn, "order-r2", portable, "portable_json", apart=True)
    _step(conn, "order-r2", 4)
    (row,) = KeyedSteps().deliveries(conn)
    assert (row["destination"], row["status"], row["key"]) == ("x", "delivered", "order-r2:4")
    assert "idempotency_key" not in KeyedSteps.not_given
    assert "idempotency_key" in Steps.not_given


def test_a_pickle_naming_a_class_is_refused_and_nothing_is_called(
    conn: Connection, tmp_path: Path
) -> None:
    """A hostile program's inputs could run code when unpickled: the harness builds plain
    data only, and says which name it refused."""
    marker = tmp_path / "called"

    class Touch:
        def __reduce__(self) -> tuple[Any, tuple[Path]]:
            return (Path.touch, (marker,))

    evil = base64.b64encode(pickle.dumps({"args": ("r3", {}, [Touch()]), "kwargs": {}})).decode()
    _workflow(conn, "order-r3", evil)
    with pytest.raises(LedgerRefusedError, match=r"pathlib\.Path\.touch|pathlib.*touch|Path"):
        Steps().deliveries(conn)
    assert not marker.exists()
    # the same inputs as plain data are read
    conn.execute(
        text("UPDATE workflow_status SET inputs = :i"), {"i": _pickled(("r3", {}, ["z"]), {})}
    )
    assert _states(Steps().deliveries(conn)) == {"z": "pending"}


@pytest.mark.parametrize(
    ("inputs", "said"),
    [
        (("r4", {}), "no argument 2"),  # the recipients argument is not there
        (("r4", {}, [{"not": "a name"}]), "holds dict"),  # a recipient that is no name
        (("r4", {}, ["a"]), "ran step 'post_webhook' 2 times for 1 recipient"),
    ],
)
def test_a_mapping_that_does_not_fit_is_refused_never_read_as_a_state(
    conn: Connection, inputs: tuple[Any, ...], said: str
) -> None:
    """A ledger line that does not fit the workflow is the scenario's error: refused (the
    case unknown), never rows that would blame the program."""
    _workflow(conn, "order-r4", _pickled(inputs, {}))
    _step(conn, "order-r4", 1)
    _step(conn, "order-r4", 2)
    with pytest.raises(LedgerRefusedError, match=said):
        Steps().deliveries(conn)


def test_no_tables_yet_is_no_workflow(conn: Connection) -> None:
    """A crash before DBOS.launch() made its tables: nothing started, nothing refused."""
    conn.exec_driver_sql("DROP TABLE workflow_status")
    assert Steps().deliveries(conn) == []


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"workflow": "w", "step": "s", "run": 0}, "recipients ="),
        ({"workflow": "w", "step": "s", "run": 0, "recipients": 1, "keys": "x"}, "unknown key"),
        ({"workflow": "", "step": "s", "run": 0, "recipients": 1}, "workflow ="),
        ({"workflow": "w", "step": "s", "run": 0, "recipients": 1, "key": "id"}, 'key = "step_id"'),
    ],
)
def test_an_inline_table_that_is_wrong_says_what_was_expected(
    settings: dict[str, Any], said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        DBOSSteps.from_inline(settings)


def test_a_scenario_with_a_wrong_dbos_key_names_its_line(tmp_path: Path) -> None:
    """Through the scenario: the error names the file, the line of ``ledger``, the key."""
    from harness.engine.plan.scenario import ScenarioError, load

    scenario = tmp_path / "s.toml"
    scenario.write_text(
        "[scenario]\n"
        'system = "cmd:python -m nothing"\n'
        'ledger = { dbos = { workflow = "w", step = "s", run = 0, recipient = 2 } }\n'
    )
    with pytest.raises(ScenarioError) as raised:
        load(scenario).build_system()
    message = str(raised.value)
    assert "s.toml:3" in message, message
    assert "unknown key(s) recipient" in message, message
