"""A DBOS program's system tables (``workflow_status``, ``operation_outputs``) read as its
ledger.

DBOS commits a workflow's inputs when the workflow starts and each step's output when the
step returns; a step whose output is recorded is never run again, one without is run again
by the recovered workflow. That is an execution ledger: the workflow's row is the decision
(its run, its recipients, frozen in its inputs), the sending step's recorded output is the
delivery's end. What DBOS does not keep is a step's inputs, so which recipient a step served
is read from the workflow's: the k-th call of the sending step serves the k-th recipient of
the workflow argument named, in the order the workflow calls it (one step per recipient,
as a loop over that argument makes it).

Inputs DBOS wrote with its portable JSON serializer are read as JSON. Its default
serializer is ``pickle``, and the program under test may be hostile: the harness unpickles
plain data only (strings, numbers, lists, tuples, dicts, sets, bytes) and refuses, naming
the class, anything that would make it import and call code (``find_class``).

Name it inline in the scenario (one line there)::

    ledger = { dbos = { workflow = "deliver_order", step = "post_webhook",
                        run = 0, recipients = 2 } }

``run`` and ``recipients`` are the workflow's arguments holding the run id and its
recipients (a list, or one recipient): a position, or a keyword's name. Add
``key = "step_id"`` when the step sends ``f"{DBOS.workflow_id}:{DBOS.step_id}"`` as its
idempotency key (then the key is compared with what the provider received).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sqlalchemy import Connection, inspect, text

from harness.agents._record import FrameworkRecord
from harness.usersystem import LedgerRefusedError, delivery_id_for

#: the largest serialized inputs the harness decodes (a workflow's arguments, not a payload)
MAX_INPUTS = 1 << 20

#: what DBOS cannot tell, in the words a report shows
NO_ATTEMPTS = (
    "DBOS keeps each step's last outcome, not each attempt: what was tried and flagged "
    "cannot be read"
)

_KEYS = ("workflow", "step", "run", "recipients", "key")


class DBOSSteps(FrameworkRecord):
    """Read a DBOS program's workflows and steps, in the case's database (DBOS's system
    database given as ``{db.url}``; on PostgreSQL, its system schema the case's own)."""

    #: the workflow's name as DBOS records it (the function's ``__qualname__``)
    workflow: ClassVar[str] = ""
    #: the sending step's name as DBOS records it
    step: ClassVar[str] = ""
    #: the workflow argument holding the run id: a position or a keyword
    run: ClassVar[int | str] = 0
    #: the workflow argument holding its recipients, in the order the step serves them
    recipients: ClassVar[int | str] = 1
    #: whether the step sends ``workflow_id:step_id`` as its idempotency key
    key_is_step_id: ClassVar[bool] = False

    not_given: ClassVar[Mapping[str, str]] = {
        "created_by": "DBOS records an executor id, not which worker process ran a step, so a "
        "restart minting a second workflow cannot be told from the first by it",
        "provider_message_id": "DBOS holds the step's return value, not the provider's receipt",
        "idempotency_key": 'the step\'s key is not recorded (name key = "step_id" when the '
        "step sends DBOS's workflow and step ids)",
        "body_hash": "DBOS holds the workflow's arguments, not the body the step sent",
    }
    parts_not_given: ClassVar[Mapping[str, str]] = {"audit": NO_ATTEMPTS}

    @classmethod
    def key_read_back(cls) -> bool:
        return cls.key_is_step_id

    @classmethod
    def from_inline(cls, settings: Mapping[str, Any]) -> type[DBOSSteps]:
        """The adapter a scenario's ``ledger = { dbos = { ... } }`` names; ValueError saying
        what was expected for a missing or wrong key."""
        unknown = sorted(set(settings) - set(_KEYS))
        if unknown:
            raise ValueError(
                f"dbos: unknown key(s) {', '.join(unknown)}; expected {', '.join(_KEYS)}"
            )
        for name in ("workflow", "step"):
            if not isinstance(settings.get(name), str) or not settings[name]:
                raise ValueError(f"dbos: {name} = the {name}'s name as DBOS records it")
        for name in ("run", "recipients"):
            value = settings.get(name)
            if isinstance(value, bool) or not isinstance(value, int | str) or value == "":
                raise ValueError(
                    f"dbos: {name} = the workflow argument holding the "
                    f"{'run id' if name == 'run' else 'recipients'}, a position or a keyword"
                )
        key = settings.get("key")
        if key not in (None, "step_id"):
            raise ValueError('dbos: key = "step_id" (the only key the harness can read back)')
        body = {n: settings[n] for n in ("workflow", "step", "run", "recipients")}
        return type("Steps", (cls,), {**body, "key_is_step_id": key == "step_id"})

    def _check(self) -> None:
        if not self.workflow or not self.step:
            raise LedgerRefusedError(
                f"{type(self).__name__}: name the workflow and its sending step, e.g. "
                'ledger = { dbos = { workflow = "deliver_order", step = "post_webhook", '
                "run = 0, recipients = 2 } }"
            )

    def deliveries(self, conn: Connection) -> list[Mapping[str, Any]]:
        self._check()
        rows: list[Mapping[str, Any]] = []
        for workflow_id, run_id, recipients in self._workflows(conn):
            steps = self._steps(conn, workflow_id)
            if len(steps) > len(recipients):
                raise LedgerRefusedError(
                    f"{type(self).__name__}: workflow {workflow_id!r} ran step "
                    f"{self.step!r} {len(steps)} times for {len(recipients)} recipient(s) in "
                    f"its argument {self.recipients!r}: the step does not serve one "
                    "recipient each, in order"
                )
            for k, destination in enumerate(recipients):
                done = steps[k] if k < len(steps) else None
                rows.append(
                    {
                        "run_id": run_id,
                        "destination": destination,
                        "delivery_id": delivery_id_for(run_id, destination),
                        "status": _state(done),
                        "key": f"{workflow_id}:{done[0]}"
                        if done is not None and self.key_is_step_id
                        else "",
                    }
                )
        return rows

    def committed_runs(self, conn: Connection) -> list[str]:
        """A workflow's row is committed with its inputs when it starts: the decision."""
        self._check()
        return [run_id for _wf, run_id, _r in self._workflows(conn)]

    def frozen_destinations(self, conn: Connection) -> list[Mapping[str, Any]]:
        self._check()
        return [
            {"run_id": run_id, "destination": d}
            for _wf, run_id, recipients in self._workflows(conn)
            for d in recipients
        ]

    def _workflows(self, conn: Connection) -> Iterable[tuple[str, str, list[str]]]:
        """(workflow id, run id, recipients) of each workflow of ours, by its id."""
        if not _has(conn, "workflow_status"):  # DBOS never launched: nothing started
            return
        query = (
            "SELECT s.workflow_uuid, COALESCE(i.inputs, s.inputs), s.serialization "
            "FROM workflow_status s LEFT JOIN workflow_input i "
            "ON i.workflow_uuid = s.workflow_uuid WHERE s.name = :name "
            "ORDER BY s.workflow_uuid"
            if _has(conn, "workflow_input")
            else "SELECT workflow_uuid, inputs, serialization FROM workflow_status "
            "WHERE name = :name ORDER BY workflow_uuid"
        )
        for workflow_id, raw, serialization in conn.execute(text(query), {"name": self.workflow}):
            args, kwargs = _inputs(str(workflow_id), raw, serialization)
            run_id = _argument(workflow_id, args, kwargs, self.run, "run")
            recipients = _argument(workflow_id, args, kwargs, self.recipients, "recipients")
            listed = recipients if isinstance(recipients, list | tuple) else [recipients]
            odd = [v for v in (run_id, *listed) if not isinstance(v, str | int)]
            if odd or isinstance(run_id, bool):
                held = type(odd[0]).__name__ if odd else "a bool"
                raise LedgerRefusedError(
                    f"DBOSSteps: workflow {workflow_id!r}'s argument {self.run!r} (run) or "
                    f"{self.recipients!r} (recipients) holds {held}: expected a run id, and a "
                    "recipient or a list of them, as text"
                )
            yield str(workflow_id), str(run_id), [str(d) for d in listed]

    def _steps(self, conn: Connection, workflow_id: str) -> list[tuple[int, bool]]:
        """(function id, whether it ended in an error) of each recorded run of the step."""
        found = conn.execute(
            text(
                "SELECT function_id, error FROM operation_outputs "
                "WHERE workflow_uuid = :wf AND function_name = :step ORDER BY function_id"
            ),
            {"wf": workflow_id, "step": self.step},
        )
        return [(int(fid), error is not None) for fid, error in found]


def _has(conn: Connection, table: str) -> bool:
    return inspect(conn).has_table(table)


def _state(done: tuple[int, bool] | None) -> str:
    if done is None:
        return "pending"  # the recovered workflow runs the step (again)
    return "failed" if done[1] else "delivered"


def _argument(
    workflow_id: str, args: list[Any], kwargs: Mapping[str, Any], which: int | str, role: str
) -> Any:
    if isinstance(which, int):
        if 0 <= which < len(args):
            return args[which]
    elif which in kwargs:
        return kwargs[which]
    raise LedgerRefusedError(
        f"DBOSSteps: workflow {workflow_id!r} has no argument {which!r} for its {role} "
        f"({len(args)} positional, keywords {sorted(kwargs) or 'none'})"
    )


def _inputs(workflow_id: str, raw: Any, serialization: Any) -> tuple[list[Any], dict[str, Any]]:
    """A workflow's (args, kwargs) as DBOS serialized them; refused when they cannot be read
    as plain data."""
    if raw is None:
        raise LedgerRefusedError(f"DBOSSteps: workflow {workflow_id!r} has no recorded inputs")
    if len(raw) > MAX_INPUTS:
        raise LedgerRefusedError(
            f"DBOSSteps: workflow {workflow_id!r}'s inputs are {len(raw)} characters "
            f"(the harness reads at most {MAX_INPUTS})"
        )
    if serialization == "portable_json":
        data = json.loads(raw)
        return list(data.get("positionalArgs") or []), dict(data.get("namedArgs") or {})
    if serialization in (None, "py_pickle"):
        data = _plain_unpickle(workflow_id, raw)
        if not isinstance(data, dict) or not isinstance(data.get("args"), tuple | list):
            raise LedgerRefusedError(
                f"DBOSSteps: workflow {workflow_id!r}'s inputs are not DBOS's "
                "{'args': ..., 'kwargs': ...}"
            )
        return list(data["args"]), dict(data.get("kwargs") or {})
    raise LedgerRefusedError(
        f"DBOSSteps: workflow {workflow_id!r} was serialized with {serialization!r}; the "
        "harness reads DBOS's portable_json and plain-data py_pickle"
    )


class _PlainData(pickle.Unpickler):
    """An unpickler that builds containers and scalars only: every class or function a
    pickle names is refused, so no code of the pickle's choosing is imported or called."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("a persistent id")


def _plain_unpickle(workflow_id: str, raw: str) -> Any:
    try:
        return _PlainData(io.BytesIO(base64.b64decode(raw, validate=True))).load()
    except (binascii.Error, ValueError) as exc:
        raise LedgerRefusedError(
            f"DBOSSteps: workflow {workflow_id!r}'s inputs are not base64 ({exc})"
        ) from None
    except pickle.UnpicklingError as exc:
        raise LedgerRefusedError(
            f"DBOSSteps: workflow {workflow_id!r}'s inputs name {exc}: the harness unpickles "
            "plain data only (str, numbers, lists, tuples, dicts, sets, bytes), never a "
            "class the program under test could choose; pass plain arguments, or serialize "
            "with DBOS's portable JSON"
        ) from None
    except (EOFError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise LedgerRefusedError(
            f"DBOSSteps: workflow {workflow_id!r}'s inputs are not a readable pickle ({exc})"
        ) from None
