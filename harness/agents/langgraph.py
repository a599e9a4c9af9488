"""A LangGraph agent's checkpoints (``SqliteSaver``, ``PostgresSaver``) read as its ledger.

One row per call of a sending tool the thread's checkpoint holds, its run the thread, its
recipient an argument of the call, and its state what the checkpoint says of it: a result
(a ``ToolMessage`` answering the call, in the saved messages or in a pending write that
LangGraph will not run again) is ``delivered``, an error result ``failed``, a call with no
result ``pending`` (the resumed thread will call it again: the agent's queue). Nothing else
is there to read, and the adapter says so: the checkpoint names no worker and holds no
provider receipt, a thread has no commit of its decision apart from the transcript itself.

Subclass it in your own module and name the subclass in the scenario::

    class Checkpoints(LangGraphCheckpoints):
        tools = {"notify": "destination"}   # sending tool -> the argument naming its recipient

    # scenario: [scenario] ledger = "mypkg.ledger:Checkpoints"
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Connection

from harness.agents._record import FrameworkRecord
from harness.usersystem import LedgerRefusedError, delivery_id_for

#: what an agent's transcript cannot tell, said in the words a report shows
NO_RECORD = (
    "the agent keeps no delivery record: a send's only trace is the tool's result in its "
    "LangGraph checkpoint (the transcript), written after the send"
)


class LangGraphCheckpoints(FrameworkRecord):
    """Read the agent's checkpoints as its ledger: a ``SqliteSaver`` file beside the case's
    SQLite database, or a ``PostgresSaver``'s tables in the case's PostgreSQL database (its
    schema, or its own database with ``[database] isolation = "database"``)."""

    #: the sending tools: tool name -> the argument that names the recipient
    tools: ClassVar[Mapping[str, str]] = {}
    #: the checkpoint file is the case database's path plus this (``{db.path}.checkpoints``
    #: in the scenario's env)
    checkpoints_suffix: ClassVar[str] = ".checkpoints"
    #: whether the tool sends its call's id as the provider's idempotency key (then the
    #: key is compared with what the provider received; otherwise it is not given)
    key_is_tool_call_id: ClassVar[bool] = False

    not_given: ClassVar[Mapping[str, str]] = {
        "created_by": f"{NO_RECORD}; it names no worker, so a restart minting a second call "
        "cannot be told from the first",
        "provider_message_id": f"{NO_RECORD}; it holds no provider receipt",
        "idempotency_key": f"{NO_RECORD}; it does not say which key the tool sent",
        "body_hash": f"{NO_RECORD}; it holds the model's arguments, not the body the tool sent",
    }
    parts_not_given: ClassVar[Mapping[str, str]] = {
        "committed_runs": f"{NO_RECORD}; a thread commits no decision apart from it",
        "frozen_destinations": f"{NO_RECORD}; the recipients are whatever the model called",
        "audit": "the agent keeps no audit trail: a checkpoint records the run's state, not "
        "each attempt, so what was tried and flagged cannot be read",
    }

    @classmethod
    def key_read_back(cls) -> bool:
        return cls.key_is_tool_call_id

    @classmethod
    def from_inline(cls, settings: Mapping[str, Any]) -> type[LangGraphCheckpoints]:
        """The adapter a scenario's ``ledger = { langgraph = { TOOL = ARGUMENT } }`` names;
        ValueError for a value that is not an argument's name."""
        odd = sorted(k for k, v in settings.items() if not isinstance(v, str) or not v)
        if odd:
            raise ValueError(
                f"langgraph: {', '.join(odd)}: expected the name of the argument naming the "
                'recipient, e.g. notify = "destination"'
            )
        return type("Checkpoints", (cls,), {"tools": dict(settings)})

    def checkpoints_path(self, conn: Connection) -> Path:
        database = conn.engine.url.database
        if not database:
            raise LedgerRefusedError(
                f"{type(self).__name__} reads a SqliteSaver file beside the case's SQLite "
                "database, and this one is in memory"
            )
        return Path(database + self.checkpoints_suffix)

    def deliveries(self, conn: Connection) -> list[Mapping[str, Any]]:
        if not self.tools:
            raise LedgerRefusedError(
                f"{type(self).__name__}.tools is empty: name the sending tools and the "
                'argument naming each one\'s recipient, e.g. tools = {"notify": "destination"}'
            )
        if conn.engine.url.get_backend_name() == "postgresql":
            threads = _postgres_threads(conn)
        else:
            path = self.checkpoints_path(conn)
            if not path.exists():  # nothing saved (a crash before the first checkpoint)
                return []
            threads = _sqlite_threads(path)
        rows: list[Mapping[str, Any]] = []
        for thread, messages in threads:
            if messages is None:  # no transcript to read: refused, never read as "no send"
                raise LedgerRefusedError(
                    f"{type(self).__name__} reads a graph whose state keeps its messages "
                    f"(MessagesState); thread {thread!r} has no messages channel (the "
                    "functional API keeps its calls in task results, which it does not read)"
                )
            rows.extend(self._calls(thread, messages))
        return rows

    def _calls(self, thread: str, messages: list[Any]) -> Iterable[Mapping[str, Any]]:
        results = {
            str(m.tool_call_id): str(getattr(m, "status", "success"))
            for m in messages
            if getattr(m, "type", None) == "tool"
        }
        for message in messages:
            for call in getattr(message, "tool_calls", None) or ():
                argument = self.tools.get(str(call.get("name")))
                if argument is None:
                    continue
                args = call.get("args") or {}
                if argument not in args:
                    raise LedgerRefusedError(
                        f"{type(self).__name__}: a call of {call.get('name')!r} in thread "
                        f"{thread!r} has no argument {argument!r} (it has "
                        f"{', '.join(map(repr, sorted(args))) or 'none'})"
                    )
                destination = str(args[argument])
                result = results.get(str(call.get("id")))
                yield {
                    "run_id": thread,
                    "destination": destination,
                    "delivery_id": delivery_id_for(thread, destination),
                    "status": _state(result),
                    "key": str(call.get("id")) if self.key_is_tool_call_id else "",
                }


def _state(result: str | None) -> str:
    if result is None:
        return "pending"
    return "failed" if result == "error" else "delivered"


def _sqlite_threads(path: Path) -> Iterable[tuple[str, list[Any] | None]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        threads = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
        yield from _threads(SqliteSaver(conn), threads)
    finally:
        conn.close()


def _postgres_threads(conn: Connection) -> Iterable[tuple[str, list[Any] | None]]:
    """Through the case's own connection (its search_path: the case's schema), so the
    checkpoints read are the ones this case's agent saved."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from sqlalchemy import inspect

    if not inspect(conn).has_table("checkpoints"):  # nothing saved, or setup() never ran
        return
    threads = [r[0] for r in conn.exec_driver_sql("SELECT DISTINCT thread_id FROM checkpoints")]
    driver: Any = conn.connection.driver_connection  # psycopg 3: the saver sets dict rows
    yield from _threads(PostgresSaver(driver), threads)


def _threads(saver: Any, threads: list[str]) -> Iterable[tuple[str, list[Any] | None]]:
    """Each thread's messages as its latest checkpoint holds them, with the results of
    tasks whose writes were saved (LangGraph applies them on resume, never reruns them);
    None for a thread whose state has no messages channel at all."""
    for thread in sorted(threads):
        found = saver.get_tuple({"configurable": {"thread_id": thread}})
        if found is None:
            continue
        values = found.checkpoint.get("channel_values", {})
        writes = [(c, v) for _task, c, v in found.pending_writes or () if c == "messages"]
        if "messages" not in values and not writes:
            yield str(thread), None if _ran(found) else []
            continue
        messages = list(values.get("messages") or ())
        for _channel, value in writes:
            messages.extend(value if isinstance(value, list) else [value])
        yield str(thread), messages


def _ran(found: Any) -> bool:
    """Whether a thread's checkpoint is past its input: one saved before any node ran has
    no messages yet, whatever the graph keeps."""
    step = (found.metadata or {}).get("step")
    return isinstance(step, int) and step >= 0
