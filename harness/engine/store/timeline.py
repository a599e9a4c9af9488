"""A case's timeline: what each worker, the provider and the ledger did, on one clock.

``build_timeline`` turns the trace (spawns, boundary hits, the kill, exits), the provider's
effect log and, where it can be read, the ledger's audit trail into the report's ``timeline``
events: ``{t, lane, kind, label, detail}`` with ``t`` in seconds since the case's first event.
The campaign can call it with what it already holds; ``timeline_from_workdir`` rebuilds the
same thing from a kept work dir (the trace file, the provider log, the case's SQLite ledger).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: provider outcomes that created a new effect (a message really went out)
ACCEPTED = frozenset({"fresh", "expired_then_accepted"})
PROVIDER_LANE = "provider"
LEDGER_LANE = "ledger"
HARNESS_LANE = "harness"

#: the provider effect logs of a campaign's work dir
_PROVIDER_LOGS = "provider-effects*.sqlite"
_EFFECT_COLUMNS = (
    "seq",
    "epoch",
    "received_at",
    "destination",
    "run_id",
    "delivery_id",
    "idempotency_key",
    "outcome",
    "provider_message_id",
    "fault",
    "status_code",
)


def _as_mapping(item: Any) -> Mapping[str, Any]:
    """A record as a mapping: a dict, a dataclass (``AuditRow``, ``EffectRow``...), or
    anything with ``to_json``."""
    if isinstance(item, Mapping):
        return item
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    to_json = getattr(item, "to_json", None)
    if callable(to_json):
        data = to_json()
        if isinstance(data, Mapping):
            return data
    raise TypeError(f"cannot read a timeline source from {type(item).__name__}")


def build_timeline(
    trace_events: Iterable[Any],
    effects: Iterable[Any] | None = None,
    *,
    ledger_events: Iterable[Any] | None = None,
    t0: float | None = None,
    provider_advances: Sequence[tuple[float, float]] = (),
) -> list[dict[str, Any]]:
    """Merge trace events, provider effects and ledger audit rows into report timeline events.

    ``trace_events`` are ``harness.engine.store.trace.TraceEvent`` (or their JSON), on wall time.
    ``effects`` are ``EffectRow``/``fake_providers.Effect`` (or their JSON); their
    ``received_at`` is on the provider's clock, put back on wall time with
    ``provider_advances``, the provider's clock moves as ``(wall_at, seconds)`` over the whole
    campaign (none: already wall time; ``read_effects`` converts from the log itself).
    ``ledger_events`` (``AuditRow`` or mappings) are audit rows (``at``, ``event``, ``delivery_id``,
    ``run_id``, ``worker``) stamped by the case's shared clock: the trace's ``clock_jump``
    events are subtracted, and an event is kept inside its worker's lifetime (a worker's own
    autojump moves only the shared clock and is not traced). ``t0`` defaults to the earliest
    time seen.
    """
    trace, jumps, alive, readings = _trace_lane(trace_events)
    provider = _provider_lane(effects, readings, provider_advances)
    ledger = _ledger_lane(ledger_events, readings, jumps, alive)
    # the lanes in this order, each in its own order: ties on time keep it
    raw = [(at, order, event) for order, (at, event) in enumerate(trace + provider + ledger)]
    if not raw:
        return []
    origin = t0 if t0 is not None else min(t for t, _, _ in raw)
    raw.sort(key=lambda r: (r[0], r[1]))
    return [{"t": round(t - origin, 6), **event} for t, _, event in raw]


#: one event of a lane: (wall time, the event as a report has it)
_Placed = tuple[float, dict[str, Any]]


def _trace_lane(
    trace_events: Iterable[Any],
) -> tuple[
    list[_Placed], list[tuple[float, float]], dict[str, list[float]], list[tuple[float, float]]
]:
    """The harness's and the workers' lanes, and what the other lanes are placed by: the
    clock jumps, each worker's lifetime, and every (case clock reading, wall time) seen."""
    placed: list[_Placed] = []
    jumps: list[tuple[float, float]] = []
    alive: dict[str, list[float]] = {}
    readings: list[tuple[float, float]] = []
    for item in trace_events:
        ev = _as_mapping(item)
        t = float(ev["t"])
        if isinstance(ev.get("c"), int | float):
            readings.append((float(ev["c"]), t))
        placed.append((t, _trace_event(ev)))
        seconds = (ev.get("detail") or {}).get("seconds")
        if ev["event"] == "clock_jump" and isinstance(seconds, int | float):
            jumps.append((t, float(seconds)))
        if ev["event"] in ("spawn", "exit"):
            alive.setdefault(str(ev["worker"]), []).append(t)
    return placed, jumps, alive, readings


def _provider_lane(
    effects: Iterable[Any] | None,
    readings: Sequence[tuple[float, float]],
    provider_advances: Sequence[tuple[float, float]],
) -> list[_Placed]:
    """Every effect the providers logged, on wall time, each repeat of an accepted identity
    marked a duplicate and linked to the first."""
    placed: list[_Placed] = []
    accepted_seen: dict[tuple[str, str], int] = {}
    #: the first accepted effect of each identity: what a later one repeats
    first_seq: dict[tuple[str, str], Any] = {}
    first_provider: dict[tuple[str, str], Any] = {}
    effect_rows = [_as_mapping(e) for e in effects or ()]
    # several providers (``[provider.NAME]``): each has its own log and seq numbers, so
    # effects are ordered by when they were received and each one says its provider
    several = len({str(e.get("provider")) for e in effect_rows if e.get("provider")}) > 1
    for eff in sorted(
        effect_rows,
        key=lambda e: (
            (float(e.get("received_at") or 0.0), e.get("seq") or 0)
            if several
            else (0.0, e.get("seq") or 0)
        ),
    ):
        outcome = str(eff.get("outcome", ""))
        detail: dict[str, Any] = {
            k: eff.get(k)
            for k in (
                "seq",
                "outcome",
                "destination",
                "run_id",
                "delivery_id",
                "idempotency_key",
                "provider_message_id",
                "fault",
                "status_code",
                *(("provider",) if several else ()),
            )
            if eff.get(k) is not None
        }
        if outcome in ACCEPTED:
            ident = (str(eff.get("run_id") or ""), str(eff.get("destination") or ""))
            accepted_seen[ident] = accepted_seen.get(ident, 0) + 1
            detail["nth_accepted"] = accepted_seen[ident]
            detail["duplicate"] = accepted_seen[ident] > 1
            if detail["duplicate"] and first_seq.get(ident) is not None:
                detail["repeats"] = first_seq[ident]  # so a report can link it to the original
                if several:
                    detail["repeats_provider"] = first_provider.get(ident)
            first_seq.setdefault(ident, eff.get("seq"))
            first_provider.setdefault(ident, eff.get("provider"))
        label = outcome + (" (duplicate)" if detail.get("duplicate") else "")
        if several:
            label += f" at {eff.get('provider')}"
        event = {"lane": PROVIDER_LANE, "kind": "effect", "label": label, "detail": detail}
        received_at = float(eff.get("received_at") or 0.0)
        received = (
            reading_to_wall(received_at, readings)
            if readings
            else to_wall(received_at, provider_advances)
        )
        placed.append((received, event))
    return placed


def _ledger_lane(
    ledger_events: Iterable[Any] | None,
    readings: Sequence[tuple[float, float]],
    jumps: Sequence[tuple[float, float]],
    alive: Mapping[str, list[float]],
) -> list[_Placed]:
    """The ledger's audit rows on wall time, each kept inside its worker's lifetime."""
    placed: list[_Placed] = []
    for item in ledger_events or ():
        row = _as_mapping(item)
        detail = {
            k: row.get(k)
            for k in ("delivery_id", "run_id", "worker", "lease_epoch", "info")
            if row.get(k) is not None
        }
        event = {
            "lane": LEDGER_LANE,
            "kind": "ledger",
            "label": str(row["event"]),
            "detail": detail,
        }
        at = (
            reading_to_wall(float(row["at"]), readings)
            if readings
            else to_wall(float(row["at"]), jumps)
        )
        span = alive.get(str(row.get("worker")))
        if span:
            at = min(max(at, min(span)), max(span))
        placed.append((at, event))
    return placed


def _trace_event(ev: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(ev["event"])
    worker = str(ev.get("worker") or "") or HARNESS_LANE
    extra = dict(ev.get("detail") or {})
    detail: dict[str, Any] = {"pid": ev.get("pid")}
    boundary, hit = ev.get("boundary"), ev.get("hit")
    if boundary is not None:
        detail["boundary"] = boundary
        detail["hit"] = hit
    detail.update(extra)
    if kind == "spawn":
        label = f"{worker} started (pid {ev.get('pid')})"
    elif kind == "hit":
        label = f"{boundary}#{hit}"
    elif kind == "crash":
        label = f"SIGKILL at {boundary}#{hit}"
    elif kind == "exit":
        outcome = extra.get("outcome") or "exited"
        how = extra.get("signal") or (
            f"exit {extra['exit_code']}" if extra.get("exit_code") is not None else ""
        )
        label = f"{outcome}" + (f" ({how})" if how else "")
    else:  # pause, hang, raise, restore, clock_jump...: whatever the harness records next
        label = kind + (f" at {boundary}#{hit}" if boundary is not None else "")
    return {"lane": worker, "kind": kind, "label": label, "detail": detail}


# -- from a kept work dir ---------------------------------------------------------------------


def timeline_from_workdir(workdir: Path, slug: str) -> list[dict[str, Any]] | None:
    """Rebuild a case's timeline from ``workdir/<slug>/trace.jsonl`` and its neighbours."""
    from harness.engine.store import trace

    case_dir = workdir / slug
    events = trace.read(case_dir / "trace.jsonl")
    if not events:
        return None
    start = min(e.t for e in events)
    opened = next((e for e in events if e.event == "provider_epoch"), None)
    epoch = (opened.detail or {}).get("epoch") if opened is not None else None
    # several providers: each opened its own epoch (``provider_epoch`` names it), and each
    # keeps its own log, ``provider-effects-<name>.sqlite`` past the first
    named = {
        str((e.detail or {}).get("provider")): (e.detail or {}).get("epoch")
        for e in events
        if e.event == "provider_epoch" and (e.detail or {}).get("provider")
    }
    first = next(iter(named), None)
    effects: list[dict[str, Any]] = []
    for log in sorted(workdir.glob(_PROVIDER_LOGS)):
        suffix = log.name.removesuffix(".sqlite").removeprefix("provider-effects")
        name = suffix.removeprefix("-") or first
        found = read_effects(log, start=start, epoch=named.get(name, epoch) if name else epoch)
        if name is not None and named:
            found = [{**row, "provider": name} for row in found or ()]
        effects += found or []
    ledger = read_ledger_events(case_dir)
    return build_timeline(events, effects, ledger_events=ledger, t0=start)


def _connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)


def read_effects(
    log: Path, *, start: float, epoch: int | None = None
) -> list[dict[str, Any]] | None:
    """The provider effects of the case's epoch: ``epoch`` (the one the harness opened for
    the case, from its trace), else the epoch that was current when the case started.

    The provider's clock may have been advanced (``clock_advances``); times are put back on
    the wall clock so they line up with the trace. None if the log cannot be read.
    """
    if not log.exists():
        return None
    try:
        conn = _connect_ro(log)
        try:
            advances = [
                (float(at), float(sec))
                for at, sec in conn.execute("SELECT at, advance_s FROM clock_advances ORDER BY id")
            ]
            epochs = conn.execute("SELECT epoch, started_at FROM epochs ORDER BY epoch").fetchall()
            chosen = epoch if isinstance(epoch, int) else None
            for number, started in epochs if chosen is None else ():
                if to_wall(float(started), advances) <= start + 1e-3:
                    chosen = number
            if chosen is None:
                return None
            rows = conn.execute(
                f"SELECT {', '.join(_EFFECT_COLUMNS)} FROM effects WHERE epoch = ? ORDER BY seq",
                (chosen,),
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    effects = []
    for row in rows:
        data = dict(zip(_EFFECT_COLUMNS, row, strict=True))
        data["provider_received_at"] = data["received_at"]
        data["received_at"] = to_wall(float(data["received_at"]), advances)
        effects.append(data)
    return effects


def reading_to_wall(reading: float, readings: Sequence[tuple[float, float]]) -> float:
    """A case clock reading -> wall time, from the trace lines that carry readings.

    The case clock stands still between moves, so a reading names an interval of wall time;
    a record stamped with it was made after the last trace line that saw the clock at or
    before it: that line's wall time (the first line's, for a reading before every line).
    """
    best: float | None = None
    for c, t in readings:
        if c <= reading and (best is None or t >= best):
            best = t
    return best if best is not None else min(t for _, t in readings)


def to_wall(moved_t: float, advances: Sequence[tuple[float, float]]) -> float:
    """A time on a moved clock -> wall time, given its advances as ``(wall_at, seconds)``.

    The clock read ``wall + every advance made before that wall moment``; advances are in
    order, so peel them off while the wall moment they imply is still after them.
    """
    offset = 0.0
    for at, advance in advances:
        if at <= moved_t - (offset + advance):
            offset += advance
        else:
            break
    return moved_t - offset


def read_ledger_events(case_dir: Path) -> list[dict[str, Any]] | None:
    """The audit trail (``delivery_events``) of a case's SQLite ledger, if there is one."""
    for db in sorted(case_dir.glob("*.sqlite")):
        try:
            conn = _connect_ro(db)
            try:
                rows = conn.execute(
                    "SELECT at, event, delivery_id, run_id, worker, lease_epoch, detail"
                    " FROM delivery_events ORDER BY event_id"
                ).fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            continue
        events = []
        for at, event, delivery_id, run_id, worker, epoch, detail in rows:
            info: Any = None
            if detail:
                try:
                    info = json.loads(detail)
                except ValueError:
                    info = detail
            events.append(
                {
                    "at": at,
                    "event": event,
                    "delivery_id": delivery_id,
                    "run_id": run_id,
                    "worker": worker,
                    "lease_epoch": epoch,
                    "info": info,
                }
            )
        return events
    return None


# -- when no timeline was recorded ------------------------------------------------------------


def synthesize(case: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A coarse timeline from the case's worker records alone (spawn, kill, exit per worker).

    Used to draw a case whose report carries no ``timeline`` (its work dir was gone).
    """
    workers = list(case.get("workers", []))
    events: list[dict[str, Any]] = []
    clock = 0.0
    origin = None
    if workers and all("started_at" in w for w in workers):
        origin = min(float(w["started_at"]) for w in workers)
    for w in workers:
        name = str(w["worker"])
        begin = float(w["started_at"]) - origin if origin is not None else clock
        end = begin + float(w.get("duration_s") or 0.0)
        clock = end
        pid = w.get("pid")
        events.append(
            {
                "t": round(begin, 6),
                "lane": name,
                "kind": "spawn",
                "label": f"{name} started (pid {pid})",
                "detail": {"pid": pid},
            }
        )
        if w.get("outcome") == "crashed_as_planned" and w.get("boundary"):
            where = f"{w['boundary']}#{w.get('hit')}"
            events.append(
                {
                    "t": round(end, 6),
                    "lane": name,
                    "kind": "crash",
                    "label": f"SIGKILL at {where}",
                    "detail": {"pid": pid, "boundary": w["boundary"], "hit": w.get("hit")},
                }
            )
        how = w.get("signal") or (
            f"exit {w['exit_code']}" if w.get("exit_code") is not None else ""
        )
        events.append(
            {
                "t": round(end, 6),
                "lane": name,
                "kind": "exit",
                "label": str(w.get("outcome")) + (f" ({how})" if how else ""),
                "detail": {"pid": pid, "outcome": w.get("outcome")},
            }
        )
    return events
