"""The trace store: one append-only JSON-lines file per case.

Workers append a line per boundary hit (before any armed action), the supervisor appends
spawns and exits. A crash is provable from the trace alone: the "crash" line names the
boundary and hit, and the supervisor's exit line says the same pid died by SIGKILL.

Every line carries ``t``, wall time (the order and the pace of what happened), and, when the
case has a clock file next to its trace (``CLOCK_FILE``), ``c``: the case clock's reading
at that moment, the time the ledger and the provider stamp their records with.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from harness.clock import SharedClock
from harness.names import BOUNDARIES, NEAR_SIDE_KINDS, near_side_kind

if TYPE_CHECKING:  # not imported at run time: every armed worker process imports this module
    from pathlib import Path

#: the case clock's file name, next to the case's trace file
CLOCK_FILE: Final = "clock"


def trace_clock(trace_path: str | Path) -> SharedClock | None:
    """The case clock that sits next to ``trace_path``, if there is one."""
    path = os.path.join(os.path.dirname(os.fspath(trace_path)), CLOCK_FILE)
    return SharedClock(path) if os.path.exists(path) else None


@dataclass(frozen=True)
class TraceEvent:
    t: float
    event: str
    worker: str
    pid: int
    boundary: str | None = None
    hit: int | None = None
    detail: dict[str, Any] | None = None
    #: the case clock's reading when the line was written (None: no case clock)
    c: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "t": self.t,
            "event": self.event,
            "worker": self.worker,
            "pid": self.pid,
        }
        if self.boundary is not None:
            data["boundary"] = self.boundary
            data["hit"] = self.hit
        if self.detail:
            data["detail"] = self.detail
        if self.c is not None:
            data["c"] = self.c
        return data


def append(
    path: Path,
    *,
    event: str,
    worker: str,
    pid: int,
    boundary: str | None = None,
    hit: int | None = None,
    at: float | None = None,
    **detail: Any,
) -> None:
    """Record a supervisor event on the same file the workers write to. ``boundary`` and
    ``hit`` (a crash at a far-side point the harness itself caused) are written where a
    worker's boundary line has them, so every reader counts them alike. ``at`` is when the
    event began, when that was before the line could be written (a spawn: the child may run
    and trace its own hits before its parent is scheduled again)."""
    line: dict[str, Any] = {
        "t": time.time() if at is None else at,
        "event": event,
        "worker": worker,
        "pid": pid,
        "detail": detail,
    }
    if boundary is not None:
        line["boundary"] = boundary
        line["hit"] = hit
    clock = trace_clock(path)
    if clock is not None:
        line["c"] = clock.now()
        clock.close()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def read(path: Path) -> list[TraceEvent]:
    """All events in file order; a torn last line (a worker killed mid-write) is skipped."""
    if not path.exists():
        return []
    events: list[TraceEvent] = []
    for raw in path.read_text().splitlines():
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            continue
        events.append(
            TraceEvent(
                t=float(data["t"]),
                event=str(data["event"]),
                worker=str(data["worker"]),
                pid=int(data["pid"]),
                boundary=data.get("boundary"),
                hit=data.get("hit"),
                detail=data.get("detail"),
                c=float(data["c"]) if isinstance(data.get("c"), int | float) else None,
            )
        )
    return events


def boundaries_reached(events: list[TraceEvent]) -> dict[str, int]:
    """How many times each boundary was reached, over every worker of the case.

    Listed in the documented flow order (a user system's own boundaries after, by name, then
    the near-side points the harness found, by call site and kind), not in the order they
    were first hit, which racing workers change from run to run.
    """
    counts: dict[str, int] = {}
    for ev in events:
        if ev.boundary is not None:
            counts[ev.boundary] = counts.get(ev.boundary, 0) + 1
    return {name: counts[name] for name in sorted(counts, key=_flow_key)}


_FLOW = {name: i for i, name in enumerate(BOUNDARIES)}
_KIND_ORDER = {kind: i for i, kind in enumerate(NEAR_SIDE_KINDS)}


def _flow_key(name: str) -> tuple[int, str, int, int, str]:
    kind = near_side_kind(name)
    if kind is None:
        return (_FLOW.get(name, len(_FLOW)), name, 0, 0, "")
    stem, _, line = name[len(kind) + 1 :].rpartition(".")
    at = int(line) if line.isdigit() else 0
    return (len(_FLOW) + 1, stem, at, _KIND_ORDER[kind], name)


def point_targets(events: list[TraceEvent]) -> dict[str, list[str]]:
    """What each discovered point talked to (``detail.target`` of its hits), each target
    once, in the order first seen: for a dry run's listing, never for a point's name."""
    found: dict[str, list[str]] = {}
    for ev in events:
        target = (ev.detail or {}).get("target") if ev.boundary is not None else None
        if isinstance(target, str) and ev.boundary is not None:
            seen = found.setdefault(ev.boundary, [])
            if target not in seen:
                seen.append(target)
    return found


def point_callers(events: list[TraceEvent]) -> dict[str, dict[str, int]]:
    """Each discovered point's callers (``detail.via``: the worker's frame that called the
    helper the point is in), each with the first hit it made, in hit order: a point reached
    from two places is crashed at the first hit of each by certify."""
    found: dict[str, dict[str, int]] = {}
    for ev in events:
        via = (ev.detail or {}).get("via") if ev.boundary is not None else None
        if isinstance(via, str) and ev.boundary is not None and isinstance(ev.hit, int):
            first = found.setdefault(ev.boundary, {})
            if via not in first or ev.hit < first[via]:
                first[via] = ev.hit
    return {b: dict(sorted(c.items(), key=lambda kv: kv[1])) for b, c in found.items()}


def hit_classes(events: list[TraceEvent], worker: str) -> dict[str, dict[int, str]]:
    """The class of each hit ``worker`` made at each discovered point: the path through
    library code below the worker's line (``detail.chain``), the worker's line that called
    it (``detail.via``) and whether the commit changed a row (``detail.changed``). Hits of
    one class went the same way to the same kind of effect; a hit without a chain (a named
    boundary, a point a framework names) is in no class and is left out."""
    found: dict[str, dict[int, str]] = {}
    for ev in events:
        detail = ev.detail or {}
        chain = detail.get("chain")
        if ev.boundary is None or ev.worker != worker or not isinstance(ev.hit, int):
            continue
        if not isinstance(chain, str):
            continue
        wrote = "idle" if detail.get("changed") is False else "effect"
        found.setdefault(ev.boundary, {})[ev.hit] = f"{chain}|{detail.get('via') or ''}|{wrote}"
    return found


def unnamed_points(events: list[TraceEvent]) -> dict[str, int]:
    """Every send or commit the hooks saw and could not name (``unnamed_point``), by kind and
    by whom (``after_commit by langgraph/...:put``), counted: never a crash point, so never
    crashed, and said so beside the coverage."""
    counts: dict[str, int] = {}
    for ev in events:
        if ev.event == "unnamed_point" and ev.detail:
            key = f"{ev.detail.get('kind', '?')} by {ev.detail.get('by', '?')}"
            counts[key] = counts.get(key, 0) + 1
    return {key: counts[key] for key in sorted(counts)}
