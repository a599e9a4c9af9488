"""What a campaign was asked (``CampaignSettings``) and what it came to (``CampaignResult``,
one ``CaseResult`` per case, one ``StepRecord`` per planned step and its ``Landing``).

The types the engine and its readers share: the engine builds them, ``harness.reports`` and
the command line read them, and neither side imports the other to do so. The engine never
imports ``harness.reports``; it hands these over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.engine.plan._providers import ProviderSpec
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process._leftovers import Leftover
from harness.engine.process.lifecycle import Lifecycle
from harness.engine.process.settle import Settle
from harness.engine.process.supervisor import WorkerOutcome
from harness.invariants import CheckResult, Status
from harness.systems import System
from harness.worker_config import WorkerConfig

__all__ = [
    "DEFAULT_WORKER_DEADLINE_S",
    "RACE_MEASURED",
    "CampaignResult",
    "CampaignSettings",
    "CaseResult",
    "Landing",
    "StepRecord",
]

#: how long one worker incarnation may run before it is declared hung
DEFAULT_WORKER_DEADLINE_S = 60.0

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


class Landing(StrEnum):
    """Whether a planned step happened. Only ``LANDED`` lets a case pass."""

    #: the fault module saw its evidence: the crash line, the pause, the provider's record
    LANDED = "landed"
    #: the armed boundary hit never came (the worker finished first)
    NOT_REACHED = "not_reached"
    #: an earlier worker died or hung on its own, so the case stopped before this step
    NOT_RUN = "not_run"
    #: the step ran, but nothing shows it took effect
    UNCONFIRMED = "unconfirmed"


@dataclass
class StepRecord:
    """What became of one planned step, with the evidence a person can check."""

    step: str
    landing: Landing
    detail: str
    #: how often the step's boundary was reached by the worker it was armed on
    hits_reached: int | None = None

    @property
    def landed(self) -> bool:
        return self.landing is Landing.LANDED

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "landing": self.landing.value,
            "detail": self.detail,
            "hits_reached": self.hits_reached,
        }


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
    #: discovered point -> the worker's frames that called into it, each with its first hit
    #: (``shop.61: 1, shop.64: 2``: two commits through one helper)
    callers: dict[str, dict[str, int]] = field(default_factory=dict)
    #: discovered point -> hit -> its class (``harness.engine.store.trace.hit_classes``), of
    #: the first worker: what a sweep plans one case per class from; not in the report
    classes: dict[str, dict[int, str]] = field(default_factory=dict)
    #: run ids of accepted effects the case never intended (sorted, at most five): a worker
    #: that keeps its own work names these instead of the harness's runs
    foreign_runs: list[str] = field(default_factory=list)
    #: sends and commits the hooks saw and could not name (a library's own thread that no
    #: namer knows), by kind and by whom: never crash points, so never crashed
    unnamed: dict[str, int] = field(default_factory=dict)
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
            **({"point_callers": self.callers} if self.callers else {}),
            **({"unnamed_points": self.unnamed} if self.unnamed else {}),
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


@dataclass
class CampaignSettings:
    system: System
    seed: int
    db_url: str | None = None
    cases: list[CaseSpec] | None = None
    worker_deadline_s: float = DEFAULT_WORKER_DEADLINE_S
    keep_workdir: bool = False
    workdir: Path | None = None
    #: workload size
    runs: int = 3
    destinations_per_topic: int = 2
    #: provider fault rules applied to every case (JSON shape); None = the default workload's
    provider_faults: tuple[dict[str, Any], ...] | None = None
    #: WorkerConfig fields the scenario sets (lease_s, retry_backoff_s, ...)
    worker_overrides: dict[str, Any] = field(default_factory=dict)
    #: the provider's dedupe window (0: it dedupes nothing); the worker is told the same
    provider_window_s: float | None = None
    #: how to rerun a case: the command words before ``--case`` (certify by default)
    replay_prefix: list[str] | None = None
    #: settings a caller gave on top of the scenario or system (``harness.engine.plan._overrides``):
    #: restated as ``--set`` words in every replay command, so the replay runs this workload
    replay_overrides: dict[str, Any] = field(default_factory=dict)
    #: cases run in parallel on this many cores (each job its own provider and work dir)
    jobs: int = 1
    #: the fake provider preset the campaign runs against (``harness.presets``)
    provider_preset: str = "payments"
    #: the preset's per-instance options (``docs/providers.md``), e.g. strip_metadata
    provider_options: dict[str, Any] = field(default_factory=dict)
    #: what a crash kills: ``worker`` (its whole process tree) or ``process`` (the one
    #: process that reached the boundary)
    crash_scope: str = "worker"
    #: probe, recovery hook and deadline for a system that settles on its own timers
    settle: Settle | None = None
    #: the provider credentials granted (``harness.engine.plan.credentials``): one ``shared``
    #: ``"*"``, or
    #: one per destination group (``per-topic``, ``per-domain``)
    credentials: str = "shared"
    #: how a third-party worker lives and tells time: daemon, stop signal, fake time, ...
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: with a ``--db`` SQLite file: the name this run's case ledgers are made from, held by
    #: the campaign (``_db.claim_sqlite``) so a run sharing the file never touches them;
    #: set by ``Campaign``, inherited by its parallel jobs
    sqlite_stem: Path | None = None
    #: the first provider's name (``[provider.NAME]``); None: its preset's name
    provider_name: str | None = None
    #: the scenario's other providers, in its order (``harness.engine.plan._providers``)
    more_providers: tuple[ProviderSpec, ...] = ()
    #: how a PostgreSQL case is kept apart (``[database] isolation``): ``schema``, a schema
    #: of its own in the given database, or ``database``, a database of its own on its
    #: server (for a worker that names ``public`` or a framework making its own schemas)
    db_isolation: str = "schema"
    #: the system a ``deploy`` step starts (the next version; None: the same one again) and
    #: what runs between the two on the case's database (a migration: ``f(WorkerConfig)``)
    #: ``[broker] persistence`` (``none``, ``aof``): a Redis broker the harness starts for the
    #: campaign, ``{broker.url}`` to the workers; None: no broker of the harness's
    broker: str | None = None
    next_system: System | None = None
    prepare_next: Callable[[WorkerConfig], None] | None = None
    #: ``throwaway``: the campaign runs on a PostgreSQL server it made (``db_url`` is that
    #: server's, set by ``Campaign``), for faults that restart the server; None: the given one
    db_server: str | None = None

    @property
    def on_own_server(self) -> bool:
        """Whether the campaign runs on a throwaway PostgreSQL server of its own: one of
        its cases restarts the database server (``db_restart``), which the harness never
        does to a server it was given."""
        return self.db_server == "throwaway" or any(
            step.fault == "db_restart" for case in self.cases or () for step in case.steps
        )

    @property
    def database_shown(self) -> str:
        """The campaign's database as its first console line says it."""
        if self.on_own_server:
            return "postgresql, a throwaway server the harness made"
        if not (self.db_url or "").startswith("postgresql"):
            return "sqlite"
        return "postgresql" if self.db_isolation == "schema" else "postgresql, a database per case"

    def provider_specs(self) -> list[ProviderSpec]:
        """Every provider of the campaign, the first (the ``provider_*`` fields) first."""
        first = ProviderSpec(
            name=self.provider_name or self.provider_preset,
            preset=self.provider_preset,
            window_s=self.provider_window_s,
            options=dict(self.provider_options),
            faults=self.provider_faults,
        )
        return [first, *self.more_providers]


@dataclass
class CampaignResult:
    settings: CampaignSettings
    cases: list[CaseResult] = field(default_factory=list)
    workdir: Path | None = None
    started_at: float = field(default_factory=time.time)
    finished_at: float = 0.0
    #: extra top-level report sections (scenario, sweep coverage, determinism, ...)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def database_kind(self) -> str:
        if self.settings.on_own_server:
            return "postgresql"
        url = self.settings.db_url
        return "postgresql" if url and url.startswith("postgresql") else "sqlite"

    def covered(self) -> list[str]:
        """The system's boundaries a planned crash landed on (a far-side point counts when
        the system lists it: a program whose dry run found it; for a declared system the
        far-side cases are extra to its documented boundaries, not part of the figure)."""
        return sorted(
            {
                s.boundary
                for c in self.cases
                if c.crash_fired
                for s in c.spec.steps
                if s.boundary is not None and s.boundary in self.settings.system.boundaries
            }
        )

    def uncovered(self) -> list[str]:
        """Documented boundaries no crash landed on (only meaningful for a full campaign)."""
        if self.settings.cases is not None:
            return []
        covered = set(self.covered())
        return [b for b in self.settings.system.boundaries if b not in covered]
