"""A scenario's ``[worker]`` table, split into what the worker reads and what the harness does.

One table holds both because a user thinks of them all as the worker's: ``lease_s`` and
``retry_backoff_s`` go to the worker as overrides of its config, while ``deadline_s`` and the
lifecycle keys (``daemon``, ``stop_signal``, ``fake_time``, ...) are the harness's to act on,
so they are taken out before the rest becomes the worker's overrides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.engine.plan._scenario_toml import ScenarioFile
from harness.engine.process.lifecycle import STOP_SIGNALS, Lifecycle
from harness.errors import BadInputError

_LIFECYCLE_KEYS = (
    "daemon",
    "stop_signal",
    "stop_grace_s",
    "exits_after_crash",
    "fake_time",
    "restart_gap_s",
)


@dataclass(frozen=True)
class WorkerSettings:
    """``[worker]``, taken apart."""

    #: the settings the worker's config takes from the scenario
    overrides: dict[str, Any]
    #: wall seconds one worker incarnation may run before it is reported hung
    deadline_s: float
    #: how a third-party worker lives and tells time
    lifecycle: Lifecycle
    #: ``next``: the system a ``deploy`` step starts (None: the same one again), and
    #: ``prepare_next``: a ``module:function`` run between the two (a migration)
    next_system: str | None = None
    prepare_next: str | None = None


def read_worker(source: ScenarioFile, meta: dict[str, Any]) -> WorkerSettings:
    """``[worker]``, checked: the deadline and lifecycle out, the worker's own keys left."""
    worker = dict(source.tables.get("worker", {}))
    deadline = float(worker.pop("deadline_s", 60.0))
    lifecycle = _lifecycle(source, meta, worker)
    if "retry_backoff_s" in worker:
        backoff = worker["retry_backoff_s"]
        if not backoff:  # each value was range-checked with its table
            raise source.error("worker", "retry_backoff_s", "expected a non-empty list of seconds")
        worker["retry_backoff_s"] = tuple(float(x) for x in backoff)
    next_system = worker.pop("next", None)
    prepare_next = worker.pop("prepare_next", None)
    if prepare_next is not None and next_system is None:
        raise source.error("worker", "prepare_next", "a migration needs a next version: next = ...")
    return WorkerSettings(worker, deadline, lifecycle, next_system, prepare_next)


def _lifecycle(source: ScenarioFile, meta: dict[str, Any], worker: dict[str, Any]) -> Lifecycle:
    """``[worker]``'s lifecycle keys, taken out of the worker overrides (they are the
    harness's to act on, not settings a worker reads)."""
    found = {k: worker.pop(k) for k in _LIFECYCLE_KEYS if k in worker}
    stop_signal = found.get("stop_signal", "SIGTERM")
    if stop_signal not in STOP_SIGNALS:
        raise source.error(
            "worker",
            "stop_signal",
            f"expected one of {', '.join(STOP_SIGNALS)}, got {stop_signal!r}",
        )
    codes = found.get("exits_after_crash", [])
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
        raise source.error("worker", "exits_after_crash", f"expected exit codes, got {codes!r}")
    if found.get("fake_time"):
        _check_fake_time(source, meta)
    return Lifecycle(
        daemon=bool(found.get("daemon", False)),
        stop_signal=stop_signal,
        stop_grace_s=float(found.get("stop_grace_s", 10.0)),
        exits_after_crash=tuple(codes),
        fake_time=bool(found.get("fake_time", False)),
        restart_gap_s=(float(found["restart_gap_s"]) if "restart_gap_s" in found else None),
    )


def _check_fake_time(source: ScenarioFile, meta: dict[str, Any]) -> None:
    """``fake_time = true`` needs a program the harness execs, and the clock preload built."""
    if not str(meta.get("system", "")).startswith("cmd:"):
        raise source.error(
            "worker",
            "fake_time",
            "the clock is preloaded into a program the harness execs: it needs a cmd: system",
        )
    from harness.engine.process._faketime import preload

    try:
        preload()
    except BadInputError as exc:
        raise source.error("worker", "fake_time", str(exc)) from None
