"""``liveness``: an item left pending (or unknown) past ``next_attempt_at`` plus a grace period
is flagged overdue, and the time it took to notice is measured.

Why: the quietest failure is no failure at all. A delivery task that was scheduled and
silently dropped (an asyncio task nobody kept a reference to) or an event loop that stopped
making progress leaves no exception and a live process; the message simply never goes out,
and every error counter stays at zero. A safe system has a watchdog that checks for the
absence of success.

What the checker reads from the trace:

* ``liveness_fault`` (harness): a ``task_never_started`` or ``loop_stall`` was injected;
  ``detail.expect_overdue`` says whether a *correct* worker's due work goes overdue under it
  (a stalled loop: yes, and the watchdog must say so; a garbage collection: no, a worker
  that holds its tasks loses nothing). Absent, a flag is expected;
* ``overdue_flagged`` (worker's watchdog): a delivery sat due past the grace period
  (``waited_s``/``grace_s``, or ``overdue_since``/``detected_at``);
* ``liveness_detected`` / ``liveness_undetected`` (harness): the flag reached the harness
  (``detection_s`` after the injection), or nothing did within its budget;
* ``settle_deadline`` (harness): a system judged by a settle probe
(``harness.engine.process.settle``) still
  said "pending" at the scenario's deadline. This needs no ledger: every intended delivery the
  provider has not accepted is reported with its age.

It fails when an injected stall went unnoticed, when due work went overdue under a fault that
a correct worker survives (work was dropped by a live worker), when a detection was slower
than ``Policy.liveness_max_detection_s``, or when a delivery ends unsettled (or ``unknown``
and still queued) past its due time plus grace with no flag. It passes with the measured
detection times.

Starved is not stalled: each of those harness lines carries ``cpu``, how long the worker's
processes waited for a CPU they were ready to use (``harness.engine.process._cpu_wait``). The
harness
stretches a deadline or a budget to give that time back (up to ``STRETCH`` times); one that
still left the worker short of its due was missed by the machine, and a detection that is
within the bound once that time is taken off was slowed by it. Then the checker cannot tell
the system from the machine: the result is *unknown* ("undecided: the machine starved the
worker", with the figures), never a failure. A stalled worker is asleep, not waiting for
CPU, so it is never excused this way.
"""

from __future__ import annotations

from typing import Any

from harness.destinations import distinct
from harness.engine.store.trace import TraceEvent
from harness.invariants._evidence import detail_of, events_named, provider_times
from harness.invariants._model import (
    NOT_JUDGED,
    CheckResult,
    DeliveryRow,
    MissingEvidenceError,
    Observation,
    Status,
    need,
    recipient,
    surface_of,
)

NAME = "liveness"

#: how a verdict the machine made undecidable begins (the report and the exit rule show it)
STARVED = "undecided: the machine starved the worker"

#: used when the scenario recorded no policy (matches ``Policy.liveness_grace_s``)
DEFAULT_GRACE_S = 1.0


def _due(row: DeliveryRow) -> float:
    """When the row should have been acted on at the latest (a live lease defers it)."""
    due = row.next_attempt_at if row.next_attempt_at is not None else row.created_at
    if row.delivery_status == "claimed" and row.lease_expires_at is not None:
        due = max(due, row.lease_expires_at)
    return due


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _detection(ev: TraceEvent) -> dict[str, Any]:
    """One watchdog flag, with how long past due it was noticed."""
    d = detail_of(ev)
    since, at = _number(d.get("overdue_since")), _number(d.get("detected_at"))
    waited, grace = _number(d.get("waited_s")), _number(d.get("grace_s"))
    if since is not None and at is not None:
        took: float | None = round(at - since, 3)
    elif waited is not None:
        took = round(waited - (grace or 0.0), 3)
    else:
        took = None
    return {
        "delivery_id": d.get("delivery_id"),
        "worker": ev.worker,
        "flagged_at": ev.t,
        "waited_s": waited,
        "detection_s": took,
    }


def _missed_deadline(obs: Observation) -> CheckResult | None:
    """A settle deadline that passed with work pending: a failure, whatever the ledger says."""
    missed = events_named(obs.trace, "settle_deadline")
    if not missed:
        return None
    _, last = missed[-1]
    detail = detail_of(last)
    cpu = _starved(detail)
    if cpu is not None:
        return CheckResult(
            Status.UNKNOWN,
            f"{STARVED}: the settle deadline ({detail.get('deadline_s')}s) passed while "
            f"{_figures(cpu)}",
            {
                "starved": [cpu],
                "deadline_s": detail.get("deadline_s"),
                "probe": detail.get("probe"),
            },
        )
    accepted = {(e.run_id, recipient(obs, e.destination)) for e in obs.effects or () if e.accepted}
    pending = [
        {"run_id": run, "destination": dest, "age_s": detail.get("age_s")}
        for run, dests in sorted(obs.intended.items())
        for dest in distinct(dests, surface_of(obs))
        if (run, recipient(obs, dest)) not in accepted
    ]
    return CheckResult(
        Status.FAIL,
        f"still pending at the settle deadline ({detail.get('deadline_s')}s, work "
        f"{detail.get('age_s')}s old); {len(pending)} intended delivery(ies) not accepted",
        {
            "problems": [
                {
                    "problem": "the system did not settle by the deadline",
                    "deadline_s": detail.get("deadline_s"),
                    "age_s": detail.get("age_s"),
                    "probe_output": detail.get("probe"),
                    "cpu": detail.get("cpu"),
                    "first_sign_of_life": detail.get("first_sign_of_life"),
                }
            ],
            "pending": pending,
        },
    )


def _starved(detail: dict[str, Any]) -> dict[str, Any] | None:
    """The CPU figures the harness recorded with an event, when they say the machine
    starved the worker (``harness.engine.process._cpu_wait``); None otherwise."""
    cpu = detail.get("cpu")
    return cpu if isinstance(cpu, dict) and cpu.get("starved") is True else None


def _figures(cpu: dict[str, Any]) -> str:
    had = cpu.get("had_s")
    due = cpu.get("required_s")
    owed = f": it had {had}s of the {due}s it was due" if had is not None and due else ""
    return (
        f"{cpu.get('worker')} waited {cpu.get('waited_for_cpu_s')}s for CPU in a "
        f"{cpu.get('window_s')}s window ({cpu.get('source')}){owed}"
    )


def _blind(obs: Observation) -> bool:
    """Whether the system gives no ledger rows to judge by (no ledger, or an adapter without
    them: a blind spot), as against a ledger the harness refused (the case is unknown)."""
    if obs.ledger is None:
        return True
    try:
        obs.ledger.deliveries  # noqa: B018 - a missing part raises on reading
        obs.ledger.queue  # noqa: B018
    except MissingEvidenceError as exc:
        return str(exc).startswith(NOT_JUDGED)
    return obs.ledger.no_rows_because is not None


def _settled_in_time(obs: Observation) -> CheckResult | None:
    """A system without a ledger whose workers the harness watched settle (a daemon: the
    settle probe, or the provider's log) and that settled before the deadline each time: the
    evidence a missed deadline fails on (``_missed_deadline``) says it holds. Without this, a
    sweep of such a system listed liveness as not judged and as violated in one report."""
    settled = events_named(obs.trace, "settled")
    if not settled or not _blind(obs):
        return None
    seen = [
        {"worker": ev.worker, "by": detail_of(ev).get("by") or "the settle probe said so"}
        for _, ev in settled
    ]
    ways = sorted({str(s["by"]) for s in seen})
    return CheckResult(
        Status.PASS,
        f"settled before the settle deadline ({'; '.join(ways)}); no ledger to look for"
        " overdue rows in",
        {"settled": seen},
    )


def check(obs: Observation) -> CheckResult:
    missed = _missed_deadline(obs)
    if missed is not None:
        return missed
    in_time = _settled_in_time(obs)
    if in_time is not None:
        return in_time
    ledger = need(obs.ledger, "ledger")
    policy = obs.policy
    grace = policy.liveness_grace_s if policy is not None else DEFAULT_GRACE_S
    bound = policy.liveness_max_detection_s if policy is not None else None
    faults = events_named(obs.trace, "liveness_fault")
    flags = events_named(obs.trace, "overdue_flagged")
    detections = [_detection(ev) for _, ev in flags]
    harness_saw = [
        {"t": ev.t, **detail_of(ev)} for _, ev in events_named(obs.trace, "liveness_detected")
    ]
    undetected = [(i, ev) for i, ev in events_named(obs.trace, "liveness_undetected")]
    problems: list[dict[str, Any]] = []
    stuck = [
        r
        for r in ledger.deliveries
        if not r.settled or (r.delivery_status == "unknown" and r.delivery_id in ledger.queue)
    ]
    stuck_ids = {r.delivery_id for r in stuck}
    recovered: list[dict[str, Any]] = []
    starved: list[dict[str, Any]] = []
    # the harness's figures for each worker whose flag reached it: how long it waited for
    # CPU between the injection and the flag
    held_back = {
        str(d.get("target")): d["cpu"]
        for _, ev in events_named(obs.trace, "liveness_detected")
        if isinstance((d := detail_of(ev)).get("cpu"), dict)
    }

    for n, (i, ev) in enumerate(faults):
        fault = {"t": ev.t, **detail_of(ev)}
        end = faults[n + 1][0] if n + 1 < len(faults) else len(obs.trace)
        after = [_detection(f) for j, f in flags if i < j < end]
        gave_up = [{"t": u.t, **detail_of(u)} for j, u in undetected if i < j < end]
        starved_out = [g for g in gave_up if _starved(g) is not None]
        if gave_up and len(starved_out) == len(gave_up):
            # the budget ran out while the worker waited for CPU: the machine, not the
            # system, may have kept the flag from coming
            starved.extend(g["cpu"] for g in starved_out)
            continue
        if fault.get("expect_overdue", True):
            if gave_up or not after:
                problems.append(
                    {
                        "problem": "a stall was injected and nothing flagged the overdue work",
                        "fault": fault,
                        "harness_gave_up": gave_up,
                    }
                )
        elif gave_up or any(d["delivery_id"] in stuck_ids for d in after):
            # Under a fault a correct worker survives, a flag alone proves nothing: on a busy
            # machine due work can wait past a wall-clock grace and still be delivered. The
            # drop is work that then went nowhere: the live worker stopped (the harness gave
            # up on it) or the flagged delivery was never settled.
            problems.append(
                {
                    "problem": "due work was dropped under a fault a correct worker survives: "
                    "flagged by its watchdog and then never delivered",
                    "fault": fault,
                    "flagged": after,
                    "harness_gave_up": gave_up,
                }
            )
        else:
            recovered.extend(after)  # flagged on a slow machine, then delivered after all
    if bound is not None:
        for d in detections:
            if d["detection_s"] is not None and d["detection_s"] > bound:
                cpu = held_back.get(d["worker"]) or {}
                waited = cpu.get("waited_for_cpu_s")
                if isinstance(waited, int | float) and d["detection_s"] - waited <= bound:
                    starved.append(cpu)  # in time, given the time the machine took from it
                    continue
                problems.append(
                    {"problem": f"detection slower than the {bound}s allowed", "detection": d}
                )

    # "Now" on the ledger's clock: recorded by the harness, else the trace's last line.
    end_t = obs.observed_at
    if end_t is None:
        times = provider_times(obs.trace, start_offset=obs.provider_clock_offset_s)
        end_t = max(times, default=None)
    flagged_ids = {d["delivery_id"] for d in detections}
    flagged_ids |= {a.delivery_id for a in ledger.audit if a.event == "overdue"}
    undecidable: list[str] = []
    not_yet_due: list[str] = []
    for row in stuck:
        if row.delivery_id in flagged_ids:
            continue
        overdue_at = _due(row) + grace
        if end_t is None:
            undecidable.append(row.delivery_id)
        elif end_t >= overdue_at:
            problems.append(
                {
                    "problem": "left unsettled past its due time plus grace, never flagged",
                    "delivery_id": row.delivery_id,
                    "run_id": row.run_id,
                    "destination": row.destination,
                    "status": row.delivery_status,
                    "in_queue": row.delivery_id in ledger.queue,
                    "overdue_since": overdue_at,
                    "case_ended_at": end_t,
                    "unflagged_for_s": round(end_t - overdue_at, 3),
                }
            )
        else:
            not_yet_due.append(row.delivery_id)

    timing = [d["detection_s"] for d in detections if d["detection_s"] is not None]
    evidence: dict[str, Any] = {
        "grace_s": grace,
        "liveness_faults": [{"t": ev.t, **detail_of(ev)} for _, ev in faults],
        "detections": detections,
        "harness_detections": harness_saw,
        "max_detection_s": max(timing) if timing else None,
        "unsettled": len(stuck),
        "not_yet_overdue": not_yet_due,
        "flagged_then_delivered": recovered,
    }
    if starved:
        evidence["starved"] = starved
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} liveness problem(s): stalls unnoticed, work dropped or overdue "
            "items unflagged",
            {"problems": problems, **evidence},
        )
    if starved:
        return CheckResult(
            Status.UNKNOWN,
            f"{STARVED}: a liveness budget ran out while {_figures(starved[0])}",
            evidence,
        )
    if undecidable:
        return CheckResult(
            Status.UNKNOWN,
            f"{len(undecidable)} unsettled item(s) and no trace to tell whether they were flagged",
            {"undecidable": undecidable, **evidence},
        )
    if detections:
        return CheckResult(
            Status.PASS,
            f"{len(detections)} overdue item(s) flagged; slowest detection "
            f"{evidence['max_detection_s']}s past due",
            evidence,
        )
    if faults:
        summary = f"{len(faults)} liveness fault(s) injected; no work went overdue"
    elif stuck:
        summary = f"{len(stuck)} unsettled item(s), none overdue yet"
    else:
        summary = f"no liveness fault injected and all {len(ledger.deliveries)} deliveries settled"
    return CheckResult(Status.PASS, summary, evidence)
