"""Helpers that turn a finding into evidence a person can act on.

A failing checker names the delivery, the provider effects with their times and keys, and
the place in the trace where things went wrong: the last boundary hit, crash or harness
action recorded before the offending effect.

Clocks: a trace line written with a case clock carries its reading (``c``), the clock the
ledger and the provider (which follows the case's clock file) stamp their records with; that
reading is used as is. For a trace without readings (older traces, a system without a clock
file): trace lines carry wall time; the provider stamps effects with its own clock, which
started the case ``Observation.provider_clock_offset_s`` ahead of wall time and which the
harness moves forward together with the shared clock, recording each move as a
``clock_jump`` event. So a trace time is put on the provider's clock by adding that offset and
every jump recorded before it. A jump a worker makes on its own (autojump to its next retry)
moves only the shared clock, so ledger times can run ahead of both; checkers compare ledger
times with ``Observation.observed_at`` when the harness recorded it.
"""

from __future__ import annotations

from typing import Any

from harness.engine.store.trace import TraceEvent
from harness.invariants._model import EffectRow, Observation

#: trace events that mark where a worker was or what the harness did (spawn/exit excluded:
#: they say a process began or ended, not where in the sequence it was)
_MARKERS = frozenset({"hit", "crash", "pause", "hang", "raise"})
_HARNESS_ACTIONS = frozenset(
    {"restore", "snapshot", "roster_change", "clock_jump", "liveness_fault", "sigstop", "sigcont"}
)


def _is_marker(ev: TraceEvent) -> bool:
    return ev.boundary is not None or ev.event in _MARKERS or ev.event in _HARNESS_ACTIONS


def provider_times(trace: tuple[TraceEvent, ...], *, start_offset: float = 0.0) -> list[float]:
    """Each trace event's time on the provider's clock (wall time, the provider's lead at the
    start of the case, and the jumps recorded before it)."""
    offset = start_offset
    times: list[float] = []
    for ev in trace:
        times.append(ev.c if ev.c is not None else ev.t + offset)
        if ev.event == "clock_jump":
            seconds = (ev.detail or {}).get("seconds")
            if isinstance(seconds, int | float):
                offset += float(seconds)
    return times


def nearest_before(
    trace: tuple[TraceEvent, ...], t: float, *, start_offset: float = 0.0
) -> dict[str, Any] | None:
    """The last boundary hit, crash or harness action recorded at or before provider time t."""
    best: tuple[TraceEvent, float] | None = None
    times = provider_times(trace, start_offset=start_offset)
    for ev, at in zip(trace, times, strict=True):
        if at <= t and _is_marker(ev) and (best is None or at >= best[1]):
            best = (ev, at)
    if best is None:
        return None
    found = best[0].to_json()
    found["before_by_s"] = round(t - best[1], 6)
    return found


def effect_evidence(eff: EffectRow, obs: Observation) -> dict[str, Any]:
    """One provider record with the boundary nearest before it."""
    data = eff.to_json()
    data["nearest_boundary_before"] = nearest_before(
        obs.trace, eff.received_at, start_offset=obs.provider_clock_offset_s
    )
    return data


def events_named(trace: tuple[TraceEvent, ...], name: str) -> list[tuple[int, TraceEvent]]:
    """Trace events called ``name`` with their position (file order is causal order)."""
    return [(i, ev) for i, ev in enumerate(trace) if ev.event == name]


def restore_seq(detail: dict[str, Any], provider: str = "") -> Any:
    """The last seq ``provider`` had logged when a restore happened: with several providers
    each numbers its own log (``effects_seq_by_provider``); else ``effects_seq``."""
    by = detail.get("effects_seq_by_provider")
    if isinstance(by, dict) and provider in by:
        return by[provider]
    return detail.get("effects_seq")


def detail_of(ev: TraceEvent) -> dict[str, Any]:
    return dict(ev.detail or {})
