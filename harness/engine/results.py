"""What one case came to: its verdict, the checks, the workers, the planned steps' landings.

Its own module so that what runs cases (``campaign``, ``parallel``'s jobs) and what reads
their results (reports, the command line) share the type without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.engine.case._context import StepRecord
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process._leftovers import Leftover
from harness.engine.process.supervisor import WorkerOutcome
from harness.invariants import CheckResult, Status

__all__ = ["RACE_MEASURED", "CaseResult"]

#: a racing case's fields that the race decided (who claimed what and in which order, so how
#: often each boundary was reached, how many attempts were made and which of the workload's
#: own "N-th send" faults met which send): measurements of that run, not the seed's content.
#: Dotted paths, ``*`` for every key; each invariant's status stays content.
RACE_MEASURED = (
    "boundaries_reached",
    "timeline",
    "effects.by_outcome",
    "invariants.*.summary",
    "invariants.*.evidence",
)


@dataclass
class CaseResult:
    spec: CaseSpec
    verdict: Status
    invariants: dict[str, CheckResult]
    workers: list[WorkerOutcome]
    intended: int
    accepted: int
    reached: dict[str, int]
    crash_fired: bool
    notes: list[str]
    duration_s: float
    replay: str
    timeline: list[dict[str, Any]] = field(default_factory=list)
    #: worker -> boundary -> hits, for planning a sweep of a recovery
    hits_by_worker: dict[str, dict[str, int]] = field(default_factory=dict)
    #: a flaky case's runs of the same schedule, in order (this result is the first failing
    #: one, whose evidence it shows); empty for a case run once
    runs: list[CaseResult] = field(default_factory=list)
    #: what became of each planned step (landed, not reached, ...), in order
    step_records: list[StepRecord] = field(default_factory=list)
    #: the case's SQLite ledger file when ``--db`` named one (another run may share it, so
    #: this run's ledgers can carry a name of their own: ``_db.SqliteClaim``)
    ledger: str | None = None
    #: why nothing in this case can be decided, whatever its invariants say (its provider
    #: died under it, or was gone before it could run); None for a case judged as usual
    undecided_because: str | None = None
    #: with several providers: provider name -> accepted effects, requests logged, and of the
    #: accepted those on an intended delivery and those nobody intended, in the scenario's
    #: order; empty with one provider
    by_provider: dict[str, dict[str, int]] = field(default_factory=dict)
    #: accepted effects placed on an intended (run, recipient) delivery, and those to an
    #: intended recipient under a run or delivery nobody intended (``no_unintended_effect``);
    #: None: the providers' logs were not read, nothing was counted
    on_intended: int | None = None
    unintended: int | None = None
    #: discovered point -> what it talked to (``POST 127.0.0.1:8000/hooks``), from its hits
    targets: dict[str, list[str]] = field(default_factory=dict)
    #: every request a provider fault was applied to: which fault met which (run,
    #: destination), sorted, never in the order a race sent them (content in every case,
    #: a racing one's too: the seed pins each fault to its delivery)
    fault_targets: list[dict[str, Any]] = field(default_factory=list)
    #: provider -> the number its log had reached before this case's first record ("" for
    #: the only provider, the first one named first): a provider's ``seq`` counts every
    #: earlier case's records too, so only ``seq - base`` is the case's own
    seq_base: dict[str, int] = field(default_factory=dict)
    #: where this run's trace was written (its case dir's ``trace.jsonl``): a flaky case's
    #: runs each name their own
    trace: str | None = None
    #: every process of the case that outlived its worker or the case, named and stopped
    #: (``harness.engine.process._leftovers``): a would-be pass is then unknown
    leftovers: list[Leftover] = field(default_factory=list)

    @property
    def all_landed(self) -> bool:
        """Every planned step happened (a baseline has none to miss)."""
        return len(self.step_records) == len(self.spec.steps) and all(
            r.landed for r in self.step_records
        )

    @property
    def not_landed(self) -> list[StepRecord]:
        return [r for r in self.step_records if not r.landed]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.spec.id,
            "fault": self.spec.fault,
            "boundary": self.spec.boundary,
            "hit": self.spec.hit,
            "verdict": self.verdict.value,
            "invariants": {k: v.to_json() for k, v in self.invariants.items()},
            "effects": {
                "intended": self.intended,
                "accepted": self.accepted,
                **({"on_intended": self.on_intended} if self.on_intended is not None else {}),
                **({"unintended": self.unintended} if self.unintended is not None else {}),
                **({"by_provider": self.by_provider} if self.by_provider else {}),
            },
            "replay": self.replay,
            "steps": [str(s) for s in self.spec.steps],
            "landings": [r.to_json() for r in self.step_records],
            "crash_fired": self.crash_fired,
            "boundaries_reached": self.reached,
            **({"point_targets": self.targets} if self.targets else {}),
            **({"fault_targets": self.fault_targets} if self.fault_targets else {}),
            **({"seq_base": self.seq_base} if self.seq_base else {}),
            "workers": [w.to_json() for w in self.workers],
            "notes": self.notes,
            "duration_s": round(self.duration_s, 3),
            **({"runs": [r.run_json() for r in self.runs]} if self.runs else {}),
            **({"ledger": self.ledger} if self.ledger else {}),
            **(
                {"undecided_because": self.undecided_because}
                if self.undecided_because is not None
                else {}
            ),
            **({"measured": list(RACE_MEASURED)} if self.spec.races else {}),
            **({"leftovers": [p.to_json() for p in self.leftovers]} if self.leftovers else {}),
        }

    def run_json(self) -> dict[str, Any]:
        """One run of a schedule run more than once (a flaky case lists each)."""
        return {
            "verdict": self.verdict.value,
            "invariants_failed": sorted(
                n for n, r in self.invariants.items() if r.status is Status.FAIL
            ),
            "crash_fired": self.crash_fired,
            "workers": [w.to_json() for w in self.workers],
            "notes": self.notes,
            "duration_s": round(self.duration_s, 3),
            **({"fault_targets": self.fault_targets} if self.fault_targets else {}),
            **({"trace": self.trace} if self.trace else {}),
            **({"timeline": self.timeline} if self.timeline else {}),
        }
