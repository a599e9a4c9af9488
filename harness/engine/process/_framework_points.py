"""Names, in a framework's own terms, for the commits it makes where no line of the worker is
on the stack.

An agent framework makes its run durable from threads of its own: LangGraph writes every
checkpoint and every task's writes from a thread pool, so the stack of that commit holds the
framework and the standard library, never a line of the agent. Named by the worker's call
site (``_hooks``), such a commit has no name, and a sweep that never crashes there would
still call itself complete. Here the framework's frame on that stack says what the commit
makes durable (which checkpoint, which node's writes), which is what a person reading a
case id needs, and is the same from run to run.

A commit none of the namers knows stays unnamed: the trace records it as seen and not a
point (``unnamed_point``), so coverage can say it was never crashed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from types import FrameType
from typing import Any

#: how many frames out from the commit a namer looks for its framework's frame
_DEPTH = 30
_LANGGRAPH_CHECKPOINT = f"{os.sep}langgraph{os.sep}checkpoint{os.sep}"
_BRANCH = "branch:to:"
#: the channel of tasks sent to a node (``Send``)
_SENDS = "__pregel_tasks"


def _safe(text: str) -> str:
    """What a point's name may hold (``[A-Za-z0-9_-]``): anything else becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text) or "_"


def _tool_names(writes: Any) -> list[str]:
    """The tools whose results a task's writes hold (their ``ToolMessage``s)."""
    names: set[str] = set()
    for _channel, value in writes or ():
        for item in value if isinstance(value, list) else [value]:
            if getattr(item, "tool_call_id", None) is not None:
                names.add(str(getattr(item, "name", None) or "tool"))
    return sorted(names)


def _langgraph(frame: FrameType) -> str | None:
    """A checkpointer's ``put`` (``langgraph.checkpoint.before_NODE``: the checkpoint taken
    before NODE runs, ``.input`` for the run's input, ``.end`` for its last) or
    ``put_writes`` (``langgraph.writes.NODE``: what NODE wrote, its tool results among them;
    a task sent to a node with ``Send``, as ``create_react_agent`` sends each tool call, is
    named by the tools whose results it wrote: ``langgraph.writes.tool_NAME``)."""
    code = frame.f_code
    if code.co_name not in ("put", "put_writes") or _LANGGRAPH_CHECKPOINT not in code.co_filename:
        return None
    local: dict[str, Any] = frame.f_locals
    if code.co_name == "put_writes":
        path: Any = local.get("task_path") or ()
        if isinstance(path, str):  # LangGraph 1.x joins it: "~__pregel_pull, NODE"
            path = [part.strip() for part in path.split(",")]
        node = path[1] if len(path) > 1 and isinstance(path[1], str) else ""
        if node and not node.isdigit():
            return f"langgraph.writes.{_safe(node)}"
        tools = _tool_names(local.get("writes"))
        return "langgraph.writes." + ("+".join(f"tool_{_safe(n)}" for n in tools) or "task")
    checkpoint = local.get("checkpoint") or {}
    updated = [str(c) for c in checkpoint.get("updated_channels") or ()]
    metadata = local.get("metadata") or {}
    nexts = {c[len(_BRANCH) :] for c in updated if c.startswith(_BRANCH)}
    if _SENDS in updated:  # nodes a task was sent to (``Send``), as tool calls are
        sent = (checkpoint.get("channel_values") or {}).get(_SENDS) or ()
        nexts.update(str(s.node) for s in sent if getattr(s, "node", None))
    if metadata.get("source") == "input":
        return "langgraph.checkpoint.input"
    if not nexts:
        return "langgraph.checkpoint.end"
    return "langgraph.checkpoint.before_" + "+".join(_safe(n) for n in sorted(nexts))


_DBOS_CORE = f"{os.sep}dbos{os.sep}_core.py"


def _dbos(frame: FrameType) -> str | None:
    """DBOS recording a step's output (``dbos.step_output.STEP``: after it, a recovered
    workflow replays the step instead of running it) or looking one up
    (``dbos.step_check.STEP``), where no line of the program is on the stack (an async
    step's thread, a tool a framework runs in a worker thread). The rest stays unnamed and
    listed: DBOS's background pollers (how often they commit is the wall clock's, not the
    program's), and its workflow bookkeeping, which no frame here tells apart."""
    code = frame.f_code
    if not code.co_filename.endswith(_DBOS_CORE):
        return None
    if code.co_name in ("record_step_result", "check_existing_result"):
        step = frame.f_locals.get("step_name")
        kind = "step_output" if code.co_name == "record_step_result" else "step_check"
        return f"dbos.{kind}.{_safe(str(step).rsplit('.', 1)[-1])}" if step else None
    return None


#: every namer, tried in turn on each frame out from the commit
NAMERS: tuple[Callable[[FrameType], str | None], ...] = (_langgraph, _dbos)


def name_of(frame: FrameType | None) -> str | None:
    """The framework's name for the commit made under ``frame`` (None: no namer knows it)."""
    for _ in range(_DEPTH):
        if frame is None:
            return None
        for namer in NAMERS:
            try:
                name = namer(frame)
            except Exception:  # a framework version of another shape: unnamed, never a crash
                name = None
            if name is not None:
                return name
        frame = frame.f_back
    return None


def described(frame: FrameType | None) -> str:
    """Who made an unnamed commit or send, for the listing: the outermost library frame of
    the thread (the call a person recognises, ``requests/api:post``) and the innermost (where
    it went out), ``package/module:function``."""
    found: list[str] = []
    while frame is not None:
        filename = frame.f_code.co_filename
        for marker in ("site-packages", "dist-packages"):
            if marker + os.sep in filename:
                module = filename.split(marker + os.sep, 1)[1].removesuffix(".py")
                found.append(f"{module}:{frame.f_code.co_name}")
                break
        frame = frame.f_back
    if not found:
        return "?"
    return found[-1] if len(found) == 1 else f"{found[-1]} > {found[0]}"
