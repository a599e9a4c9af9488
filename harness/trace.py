"""The trace store: one append-only JSON-lines file per case.

Workers append a line per boundary hit (before any armed action), the supervisor appends
spawns and exits. A crash is provable from the trace alone: the "crash" line names the
boundary and hit, and the supervisor's exit line says the same pid died by SIGKILL.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TraceEvent:
    t: float
    event: str
    worker: str
    pid: int
    boundary: str | None = None
    hit: int | None = None
    detail: dict[str, Any] | None = None

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
        return data


def append(path: Path, *, event: str, worker: str, pid: int, **detail: Any) -> None:
    """Record a supervisor event on the same file the workers write to."""
    line = {"t": time.time(), "event": event, "worker": worker, "pid": pid, "detail": detail}
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
            )
        )
    return events


def boundaries_reached(events: list[TraceEvent]) -> dict[str, int]:
    """How many times each boundary was reached, over every worker of the case."""
    counts: dict[str, int] = {}
    for ev in events:
        if ev.boundary is not None:
            counts[ev.boundary] = counts.get(ev.boundary, 0) + 1
    return counts
