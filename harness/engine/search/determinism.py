"""The determinism check: rerun a sample of passing cases with the same seed and compare.

A harness whose verdicts depend on scheduling luck cannot gate CI. The shared clock jumps
instead of sleeping and every choice comes from the seed, so a rerun must agree; the report
carries the sample so a reader can see that it did (and which case did not, if any).

A rerun that gives another verdict (or another invariant status) makes its case ``flaky``,
with both runs listed, each naming its own trace: never a pass, and when the rerun failed,
that failure stands as a violation (``outcome.judge``). A failure seen once is a failure.

Agreeing is more than the same verdict: a replay that lands a fault on another recipient is
not the same case. In a racing case too every fault is pinned to a (run, destination) from the
seed (``harness.faults.provider``: a step's own fault, and the workload's "N-th send" rules),
so the faults' targets (``fault_targets``) are content in every case; only what the race
really decides may differ: which worker lane sent the faulted request, who claimed what, how
often each boundary was reached. What two runs of one seed must share is a report's *content*
(``content``): the report with its *measurements* set aside, the readings this machine and
this run decided, never the seed. They are declared here, in one place, and listed in
reports/README.md ("What two runs of one seed share"):

- the clock and how long things took (``TIMESTAMPS``, ``DURATIONS``), pids, the work dir
  and the trace paths in it, and what a worker printed (its stderr tail, a stack dump:
  ``MACHINE``);
- a provider's log number (``SEQ_KEYS``: a record's ``seq``, a duplicate's ``repeats``, a
  restore's ``effects_seq``), which counts every earlier case's records, a race's included:
  only its offset from the case's ``seq_base`` is content;
- what a race decided: a case whose workers run side by side lists those fields in its own
  ``measured`` (``_case_result.RACE_MEASURED``: how often each boundary was reached, the
  timeline, the provider's outcomes and each invariant's summary and evidence, never its
  status), and the sums over cases that count hits (a coverage entry's ``hits_reached``,
  explore's ``schedules_reaching``) are then measurements too;
- how a timeline's lanes interleave: each lane's events keep their order (content), but
  a provider's record and a ledger row a few milliseconds apart are ordered by two clocks'
  readings, so ``content`` compares the timeline lane by lane;
- what a wall-clock watchdog saw (the reference flags a delivery left due for
  ``liveness_grace_s`` of *wall* time, so a slow machine sees more): the ``liveness``
  invariant's summary and evidence (its status stays content), the audit log's length, and
  the timeline's ``overdue`` events, and a ``provider_drain`` that waited for a request
  still in flight and drained it (whether a held reply outlived the workers is wall time).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Any

from harness.engine.case.campaign import Campaign, CaseResult
from harness.invariants import Status

#: keys whose values are the machine's clock (absolute, or seconds into the case)
TIMESTAMPS = frozenset({"started_at", "ended_at", "finished_at", "flagged_at", "t"})
#: keys whose values are how long something took on this machine
DURATIONS = frozenset(
    {"duration_s", "detection_s", "waited_s", "max_detection_s", "schedules_per_second"}
)
#: keys whose values the operating system or the run's temp dir chose, or a worker printed
#: (a log line's own timestamp, a stack's addresses); what discovered points talked to (a
#: provider's port, a case's epoch and database file)
MACHINE = frozenset(
    {
        "pid",
        "workdir",
        "stderr_tail",
        "stack_dump",
        "point_targets",
        "point_callers",
        "trace",
        "traces",
        "seq_base",
    }
)
#: keys a library's own threads decide (how often its pollers committed while the case ran,
#: never named, never crashed): set aside whole, present or not
LIBRARY_DECIDED = frozenset({"unnamed_points", "unnamed_seen"})
#: keys that hold a provider's log number: content only as an offset from the case's first
#: record (``seq_base``), since the number counts every earlier case's records, a race's too
SEQ_KEYS = frozenset({"seq", "effects_seq", "repeats"})
#: sums over cases that count boundary hits (report section, key): measured once any case
#: raced
HIT_SUMS = (("coverage", "hits_reached"), ("explore", "schedules_reaching"))


def _text(value: str) -> str:
    """A sentence with its pids and durations replaced: the rest of it is content."""
    value = re.sub(r"pid \d+", "pid N", value)
    return re.sub(r"(?<![:\w.])\d+(\.\d+)?s\b", "Ns", value)  # not a size: provider_slow:1.5s


def _set_paths(value: Any, path: list[str]) -> Any:
    """``value`` with what ``path`` names (dotted, ``*`` for every key) set aside."""
    if not isinstance(value, dict):
        return value
    head, rest = path[0], path[1:]
    out = dict(value)
    for k in out if head == "*" else [head] if head in out else []:
        out[k] = _set_paths(out[k], rest) if rest else f"<measured: {k}>"
    return out


def _case_seqs(timeline: list[Any]) -> list[Any]:
    """Provider records numbered from the case's first: the provider's ``seq`` counts every
    record it logged before, an earlier case's race included, so only its offset within the
    case is content. With several providers (``[provider.NAME]``) each numbers its own log,
    so each is renumbered from its own first record (a ``repeats`` by its
    ``repeats_provider``): an earlier race at one provider shifts none of the others."""
    bases: dict[Any, int] = {}
    for e in timeline:
        detail = e.get("detail") if isinstance(e, dict) else None
        if isinstance(detail, dict) and isinstance(detail.get("seq"), int):
            who = detail.get("provider")
            bases[who] = min(bases.get(who, detail["seq"]), detail["seq"])
    if not bases:
        return timeline

    def renumber(event: Any) -> Any:
        detail = event.get("detail") if isinstance(event, dict) else None
        if not isinstance(detail, dict) or "seq" not in detail:
            return event
        who = detail.get("provider")
        owners = {"seq": who, "repeats": detail.get("repeats_provider", who)}
        moved = {
            k: v - (bases.get(owner, bases.get(who, 1)) - 1)
            for k, owner in owners.items()
            if isinstance(v := detail.get(k), int)
        }
        return {**event, "detail": {**detail, **moved}}

    return [renumber(e) for e in timeline]


def _renumber(value: Any, bases: dict[str, int]) -> Any:
    """``value`` (a case) with every provider log number made an offset from that provider's
    base (``SEQ_KEYS``; ``effects_seq_by_provider`` by its keys); a number from before the
    case's first record (a cut taken before anything was logged) reads 0."""
    first = next(iter(bases.values()))
    if isinstance(value, list):
        return [_renumber(v, bases) for v in value]
    if not isinstance(value, dict):
        return value
    who = value.get("provider")
    base = bases.get(who, first) if isinstance(who, str) else first
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k in SEQ_KEYS and isinstance(v, int) and not isinstance(v, bool):
            owner = value.get("repeats_provider", who) if k == "repeats" else who
            own = bases.get(owner, first) if isinstance(owner, str) else base
            out[k] = max(v - own, 0)
        elif k == "effects_seq_by_provider" and isinstance(v, dict):
            out[k] = {n: max(x - bases.get(n, first), 0) for n, x in v.items()}
        else:
            out[k] = _renumber(v, bases)
    return out


def _watched(event: Any) -> bool:
    """A timeline event only the wall clock decided: a watchdog's ``overdue`` flag, or a
    drain that found a request still in flight (a reply held for wall seconds) and waited
    for it; it drained either way."""
    if not isinstance(event, dict):
        return False
    detail = event.get("detail")
    drained = isinstance(detail, dict) and detail.get("drained") is True
    return "overdue" in str(event.get("label")) or (
        event.get("label") == "provider_drain" and drained
    )


def _aside(value: Any, key: str = "") -> Any:
    if key in TIMESTAMPS:
        return "<time>"
    if key in DURATIONS:
        return "<duration>"
    if key in MACHINE:
        return f"<{key}>"
    if key == "liveness" and isinstance(value, dict) and "status" in value:
        return {**value, "summary": "<watchdog>", "evidence": "<watchdog>"}
    if key == "audit_events":
        return "<count, watchdog flags included>"
    if isinstance(value, dict):
        bases = value.get("seq_base")
        if isinstance(bases, dict) and bases:
            value = _renumber(value, bases)
        measured = list(value.get("measured") or ())
        if "timeline" in value and "timeline" not in measured:
            timeline = [e for e in value["timeline"] if not _watched(e)]
            # each lane in its own order; how lanes interleave is the clocks' reading
            by_lane = sorted(timeline, key=lambda e: str(e.get("lane")))
            value = {**value, "timeline": _case_seqs(by_lane)}
        for path in measured:
            value = _set_paths(value, str(path).split("."))
        return {k: _aside(v, k) for k, v in value.items() if k not in LIBRARY_DECIDED}
    if isinstance(value, list):
        return [_aside(v) for v in value]
    if isinstance(value, str) and not value.startswith("<measured: "):
        return _text(value)
    return value


def content(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` (a report.json, or one case of it) with every measurement set aside: what
    two runs of one seed must write alike, key order included."""
    result: dict[str, Any] = _aside(report)
    if any(isinstance(c, dict) and c.get("measured") for c in report.get("cases") or ()):
        for section, key in HIT_SUMS:
            part = result.get(section)
            for entry in part if isinstance(part, list) else [part]:
                if isinstance(entry, dict) and key in entry:
                    entry[key] = "<hits, a race's included>"
    return result


def first_difference(a: Any, b: Any, where: str = "report") -> str | None:
    """Where two contents first differ (a dotted path, key order included), and how; None
    when they are equal. What a failed comparison prints, so it names the field."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{where}: keys {list(a)} != {list(b)}"
        found = (first_difference(a[k], b[k], f"{where}.{k}") for k in a)
        return next((f for f in found if f), None)
    if isinstance(a, list) and isinstance(b, list):
        pairs = enumerate(zip(a, b, strict=False))
        found = (first_difference(x, y, f"{where}[{i}]") for i, (x, y) in pairs)
        first = next((f for f in found if f), None)
        if first is None and len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        return first
    return None if a == b else f"{where}: {a!r:.200} != {b!r:.200}"


def _signature(result: CaseResult) -> dict[str, str]:
    return {name: check.status.value for name, check in result.invariants.items()}


def _difference(first: CaseResult, again: CaseResult) -> str | None:
    """Where the rerun departs from the first run in what the seed decides: a step landing
    on another recipient (or not at all), or a provider fault meeting another (run,
    destination), is another case, whatever the verdict says. The rest of a case's content
    is compared by ``content`` in the project's own tests; a third-party worker's logs and
    restarts are too much its own to gate every ``run`` on."""
    for key in ("landings", "fault_targets"):
        a, b = (content(r.to_json()).get(key) for r in (first, again))
        found = first_difference(a, b, where=f"case {first.spec.id}: {key}")
        if found:
            return found
    return None


def flaky(first: CaseResult, again: CaseResult) -> CaseResult:
    """Two runs of one case that gave other verdicts, as one ``flaky`` case listing both: it
    shows a failing run's evidence (so that failure stands), or else the first run's."""
    shown = next((r for r in (first, again) if r.verdict is Status.FAIL), first)
    return replace(shown, verdict=Status.FLAKY, runs=[first, again])


def rerun_sample(
    campaign: Campaign, results: list[CaseResult], *, size: int, seed: int
) -> list[dict[str, Any]]:
    """Rerun up to ``size`` passing cases (chosen from ``seed``); one record per rerun. It
    agrees when the verdicts, every invariant's status, the landings and the fault targets
    are the same; ``differs`` names the first landing or fault target that was not. A rerun
    with another verdict or invariant status turns its case in ``results`` into a ``flaky``
    one with both runs (``flaky``); ``traces`` names both runs' traces."""
    passing = [r for r in results if r.verdict is Status.PASS]
    chosen = random.Random(seed).sample(passing, k=min(size, len(passing)))
    sample = []
    for first in chosen:
        again = campaign.run(first.spec, slug_prefix="determinism")
        differs = _difference(first, again)
        same_verdict = first.verdict is again.verdict and _signature(first) == _signature(again)
        record: dict[str, Any] = {
            "case": first.spec.id,
            "first": first.verdict.value,
            "rerun": again.verdict.value,
            "agree": same_verdict and differs is None,
            "accepted": [first.accepted, again.accepted],
        }
        if differs is not None:
            record["differs"] = differs
        if not same_verdict:
            record["traces"] = [first.trace, again.trace]
            at = next(i for i, r in enumerate(results) if r is first)
            results[at] = flaky(first, again)
        sample.append(record)
    return sample
