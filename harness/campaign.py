"""Run cases: fresh ledger, armed worker, SIGKILL, restart, then count and judge.

A case is one fault at one place (or none: the baseline). Every case gets its own database
(a SQLite file, or a PostgreSQL schema) and its own provider epoch, so cases never see each
other's rows or effects, and any case can be replayed alone from its seed and id.
"""

from __future__ import annotations

import re
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from fake_providers import FaultRule, ProviderProcess
from harness import _db
from harness import trace as trace_store
from harness._boundary import Arm
from harness.errors import BadInputError, UnknownBoundaryError
from harness.invariants import CheckResult, EffectRow, Observation, Policy, Status, run_all
from harness.supervisor import OutcomeKind, Supervisor, WorkerOutcome
from harness.systems import System
from harness.trace import TraceEvent
from harness.worker_config import WorkerConfig
from harness.workload import Workload, build_workload, seed_database

#: how long one worker incarnation may run before it is declared hung
DEFAULT_WORKER_DEADLINE_S = 60.0
#: restarts after the planned crash before a case gives up (a restart loop is itself a finding)
MAX_RESTARTS = 3

_CASE_ID = re.compile(r"^(?:baseline|crash@(?P<boundary>[a-z0-9_]+)#(?P<hit>[1-9][0-9]*))$")
_ANOMALIES = (OutcomeKind.DIED, OutcomeKind.KILLED_UNPLANNED, OutcomeKind.HUNG)


@dataclass(frozen=True)
class CaseSpec:
    """What to inject in one case: nothing (baseline) or a crash at one boundary hit."""

    fault: str
    boundary: str | None = None
    hit: int | None = None

    @property
    def id(self) -> str:
        return "baseline" if self.boundary is None else f"{self.fault}@{self.boundary}#{self.hit}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.id.lower()).strip("_")

    @classmethod
    def parse(cls, text: str) -> CaseSpec:
        m = _CASE_ID.match(text)
        if not m:
            raise BadInputError(
                f"--case: {text!r} is not a case id; expected 'baseline' or "
                "'crash@BOUNDARY#HIT' (e.g. crash@after_claim#1)"
            )
        if m.group("boundary") is None:
            return cls(fault="none")
        return cls(fault="crash", boundary=m.group("boundary"), hit=int(m.group("hit")))


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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.spec.id,
            "fault": self.spec.fault,
            "boundary": self.spec.boundary,
            "hit": self.spec.hit,
            "verdict": self.verdict.value,
            "invariants": {k: v.to_json() for k, v in self.invariants.items()},
            "effects": {"intended": self.intended, "accepted": self.accepted},
            "replay": self.replay,
            "crash_fired": self.crash_fired,
            "boundaries_reached": self.reached,
            "workers": [w.to_json() for w in self.workers],
            "notes": self.notes,
            "duration_s": round(self.duration_s, 3),
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


@dataclass
class CampaignResult:
    settings: CampaignSettings
    cases: list[CaseResult] = field(default_factory=list)
    workdir: Path | None = None
    started_at: float = field(default_factory=time.time)
    finished_at: float = 0.0

    @property
    def database_kind(self) -> str:
        url = self.settings.db_url
        return "postgresql" if url and url.startswith("postgresql") else "sqlite"

    def covered(self) -> list[str]:
        return sorted({c.spec.boundary for c in self.cases if c.crash_fired and c.spec.boundary})

    def uncovered(self) -> list[str]:
        """Documented boundaries no crash landed on (only meaningful for a full campaign)."""
        if self.settings.cases is not None:
            return []
        covered = set(self.covered())
        return [b for b in self.settings.system.boundaries if b not in covered]


def default_cases(system: System) -> list[CaseSpec]:
    return [CaseSpec(fault="none")] + [
        CaseSpec(fault="crash", boundary=b, hit=1) for b in system.boundaries
    ]


def validate_cases(system: System, cases: list[CaseSpec]) -> None:
    for case in cases:
        if case.boundary is not None and case.boundary not in system.boundaries:
            raise UnknownBoundaryError(case.boundary, system.boundaries)


def replay_command(settings: CampaignSettings, case: CaseSpec) -> str:
    parts = [
        "crash-harness",
        "certify",
        "--system",
        settings.system.name,
        "--seed",
        str(settings.seed),
        "--case",
        case.id,
    ]
    if settings.db_url is not None:
        parts += ["--db", make_url(settings.db_url).render_as_string(hide_password=True)]
    return shlex.join(parts)


def run_campaign(
    settings: CampaignSettings, *, on_case: Callable[[CaseResult], None] | None = None
) -> CampaignResult:
    """Run every case of a campaign against one provider process and one supervisor."""
    cases = settings.cases if settings.cases is not None else default_cases(settings.system)
    validate_cases(settings.system, cases)
    if settings.db_url is not None and settings.db_url.startswith("postgresql"):
        _db.check_reachable(settings.db_url)
    workload = build_workload(settings.seed)
    made_workdir = settings.workdir is None
    workdir = settings.workdir or Path(tempfile.mkdtemp(prefix="crash-harness-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result = CampaignResult(settings=settings, workdir=workdir)
    secret = secrets.token_urlsafe(24)
    with (
        ProviderProcess.start(
            log_path=workdir / "provider-effects.sqlite",
            credentials={"worker": (secret, ["*"])},
        ) as provider,
        Supervisor(workdir=workdir) as supervisor,
    ):
        for case in cases:
            case_result = _run_case(
                settings,
                case,
                workload,
                provider=provider,
                supervisor=supervisor,
                secret=secret,
                workdir=workdir,
            )
            result.cases.append(case_result)
            if on_case is not None:
                on_case(case_result)
    result.finished_at = time.time()
    all_passed = all(c.verdict is Status.PASS for c in result.cases)
    if made_workdir and all_passed and not settings.keep_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
        result.workdir = None
    return result


def _run_case(
    settings: CampaignSettings,
    case: CaseSpec,
    workload: Workload,
    *,
    provider: ProviderProcess,
    supervisor: Supervisor,
    secret: str,
    workdir: Path,
) -> CaseResult:
    started = time.time()
    case_dir = workdir / case.slug
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    trace_path = case_dir / "trace.jsonl"
    target = _db.new_target(settings.db_url, workdir=case_dir, case_slug=case.slug)
    system = settings.system
    notes: list[str] = []
    try:
        engine = target.engine()
        try:
            system.prepare(engine)
            seed_database(engine, workload)
        finally:
            engine.dispose()  # never fork with open connections
        provider.admin.reset()
        provider.admin.set_faults([FaultRule(**rule) for rule in workload.provider_faults])

        def config(n: int) -> WorkerConfig:
            return WorkerConfig(
                db=target,
                provider_url=provider.url,
                credential_id="worker",
                credential_secret=secret,
                destination_scope="*",
                worker_name=f"w{n}",
                **dict(system.config_overrides),
            )

        reference_config = config(0)
        outcomes: list[WorkerOutcome] = []

        def run_worker(n: int, arms: list[Arm]) -> None:
            running = supervisor.start(
                f"w{n}",
                partial(system.main, config(n)),
                trace_path=trace_path,
                arms=arms,
                logdir=case_dir,
            )
            outcomes.append(
                supervisor.wait(
                    running, timeout_s=settings.worker_deadline_s, trace_path=trace_path
                )
            )

        run_worker(1, [Arm(case.boundary, case.hit or 1)] if case.boundary else [])
        while outcomes[-1].kind is OutcomeKind.CRASHED_AS_PLANNED and len(outcomes) <= MAX_RESTARTS:
            run_worker(len(outcomes) + 1, [])
        crash_fired = any(o.kind is OutcomeKind.CRASHED_AS_PLANNED for o in outcomes)
        if case.boundary and not crash_fired:
            notes.append(f"boundary {case.boundary} hit {case.hit} was never reached")
        for o in outcomes:
            if o.kind in _ANOMALIES:
                notes.append(
                    f"worker {o.worker} (pid {o.pid}) {o.kind.value}"
                    + (f" by {o.signal}" if o.signal else "")
                    + (f" with exit code {o.exit_code}" if o.exit_code else "")
                )
        policy = Policy(
            key_window_s=reference_config.key_window_s,
            retry_backoff_s=reference_config.retry_backoff_s,
            max_attempts=reference_config.max_attempts,
            lease_s=reference_config.lease_s,
            credential_scopes={"worker": ("*",)},
            provider_lookup=True,
        )
        observation = _observe(
            system, target, workload, provider, outcomes, policy, trace_store.read(trace_path)
        )
    finally:
        _db.drop_target(target)
    checks = run_all(observation)
    verdict = _verdict(checks, outcomes)
    events = trace_store.read(trace_path)
    return CaseResult(
        spec=case,
        verdict=verdict,
        invariants=checks,
        workers=outcomes,
        intended=sum(len(d) for d in workload.intended().values()),
        accepted=sum(1 for e in observation.effects or () if e.accepted),
        reached=trace_store.boundaries_reached(events),
        crash_fired=crash_fired,
        notes=notes,
        duration_s=time.time() - started,
        replay=replay_command(settings, case),
    )


def _observe(
    system: System,
    target: _db.DatabaseTarget,
    workload: Workload,
    provider: ProviderProcess,
    outcomes: list[WorkerOutcome],
    policy: Policy,
    events: list[TraceEvent],
) -> Observation:
    try:
        engine = target.engine()
        try:
            ledger = system.read_ledger(engine)
        finally:
            engine.dispose()
    except Exception:  # the checkers that need it will say unknown
        ledger = None
    try:
        effects: tuple[EffectRow, ...] | None = tuple(
            EffectRow(
                seq=e.seq,
                destination=e.destination or "",
                run_id=e.run_id or "",
                delivery_id=e.delivery_id or "",
                idempotency_key=e.idempotency_key or "",
                outcome=e.outcome,
                provider_message_id=e.provider_message_id,
                received_at=e.received_at,
                fault=e.fault,
                credential_id=e.credential_id,
                status_code=e.status_code,
            )
            for e in provider.admin.effects()
        )
    except Exception:
        effects = None
    return Observation(
        intended=workload.intended(),
        ledger=ledger,
        effects=effects,
        workers=tuple(o.worker for o in outcomes),
        policy=policy,
        trace=tuple(events),
    )


#: invariants that only mean something if the workers ran to the end; when a worker died on
#: its own or hung, their failure is a consequence of that, and the case is inconclusive
_NEEDS_COMPLETION = frozenset({"no_silent_loss"})


def _verdict(checks: dict[str, CheckResult], outcomes: list[WorkerOutcome]) -> Status:
    anomaly = any(o.kind in _ANOMALIES for o in outcomes)
    failed = {n for n, c in checks.items() if c.status is Status.FAIL}
    if anomaly:
        failed -= _NEEDS_COMPLETION
    if failed:
        return Status.FAIL
    if anomaly or any(c.status is not Status.PASS for c in checks.values()):
        return Status.UNKNOWN
    return Status.PASS
