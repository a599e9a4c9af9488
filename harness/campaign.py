"""Run cases: fresh ledger, armed workers, faults, restarts, then count and judge.

A case is a schedule of fault steps (or none: the baseline). Every case gets its own database
(a SQLite file, or a PostgreSQL schema), its own shared clock and its own provider epoch, so
cases never see each other's rows or effects, and any case can be replayed alone from its
seed and id.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from fake_providers import FaultRule, ProviderProcess
from harness import _db, _faketime, _provider_watch, _scratch, _secrets
from harness import credentials as credentials_mod
from harness import trace as trace_store
from harness._case import ANOMALIES, CaseContext, Landing, StepRecord
from harness._lifeline import LifelineCut
from harness.clock import SharedClock, start_for_seed
from harness.errors import BadInputError, UnknownBoundaryError
from harness.faults import FAULTS, FaultSpec
from harness.faults._args import ArgError
from harness.invariants import CheckResult, EffectRow, Observation, Policy, Status, run_all
from harness.invariants._model import NOT_JUDGED
from harness.lifecycle import Lifecycle
from harness.reference import adapters
from harness.schedule import CaseSpec, Step
from harness.settle import Settle
from harness.supervisor import OutcomeKind, Supervisor, WorkerOutcome
from harness.systems import System
from harness.trace import TraceEvent
from harness.worker_config import WorkerConfig
from harness.workload import Workload, build_workload, case_intent, seed_database

#: how long one worker incarnation may run before it is declared hung
DEFAULT_WORKER_DEADLINE_S = 60.0
#: a reply slower than this is an unknown outcome (kept short: timeouts are part of the tests)
HARNESS_REQUEST_TIMEOUT_S = 1.0
#: wall seconds a due delivery may sit untouched before the watchdog calls it overdue
HARNESS_LIVENESS_GRACE_S = 0.5
#: how long a case waits, once its workers are done, for the provider to answer or drop every
#: request of the case's epoch (a held reply) before it is observed
DRAIN_TIMEOUT_S = 10.0
#: how long a failed call to the provider waits to see its process end
DEATH_GRACE_S = _provider_watch.DEATH_GRACE_S
#: how often a case is opened on a provider that dies as it opens, before it is given up
OPENING_ATTEMPTS = 3

__all__ = [
    "CampaignResult",
    "CampaignSettings",
    "CaseResult",
    "CaseSpec",
    "Step",
    "default_cases",
    "run_campaign",
    "validate_cases",
]


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
            "effects": {"intended": self.intended, "accepted": self.accepted},
            "replay": self.replay,
            "steps": [str(s) for s in self.spec.steps],
            "landings": [r.to_json() for r in self.step_records],
            "crash_fired": self.crash_fired,
            "boundaries_reached": self.reached,
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
    #: settings a caller gave on top of the scenario or system (``harness._overrides``):
    #: restated as ``--set`` words in every replay command, so the replay runs this workload
    replay_overrides: dict[str, Any] = field(default_factory=dict)
    #: cases run in parallel on this many cores (each job its own provider and work dir)
    jobs: int = 1
    #: the fake provider preset the campaign runs against (``harness.reference.adapters``)
    provider_preset: str = "payments"
    #: the preset's per-instance options (``docs/providers.md``), e.g. strip_metadata
    provider_options: dict[str, Any] = field(default_factory=dict)
    #: what a crash kills: ``worker`` (its whole process tree) or ``process`` (the one
    #: process that reached the boundary)
    crash_scope: str = "worker"
    #: probe, recovery hook and deadline for a system that settles on its own timers
    settle: Settle | None = None
    #: the provider credentials granted (``harness.credentials``): one ``shared`` ``"*"``, or
    #: one per destination group (``per-topic``, ``per-domain``)
    credentials: str = "shared"
    #: how a third-party worker lives and tells time: daemon, stop signal, fake time, ...
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: with a ``--db`` SQLite file: the name this run's case ledgers are made from, held by
    #: the campaign (``_db.claim_sqlite``) so a run sharing the file never touches them;
    #: set by ``Campaign``, inherited by its parallel jobs
    sqlite_stem: Path | None = None


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
        url = self.settings.db_url
        return "postgresql" if url and url.startswith("postgresql") else "sqlite"

    def covered(self) -> list[str]:
        return sorted(
            {
                s.boundary
                for c in self.cases
                if c.crash_fired
                for s in c.spec.steps
                if s.boundary is not None
            }
        )

    def uncovered(self) -> list[str]:
        """Documented boundaries no crash landed on (only meaningful for a full campaign)."""
        if self.settings.cases is not None:
            return []
        covered = set(self.covered())
        return [b for b in self.settings.system.boundaries if b not in covered]


def default_cases(system: System) -> list[CaseSpec]:
    return [CaseSpec()] + [CaseSpec("crash", b, 1) for b in system.boundaries]


def validate_cases(system: System, cases: list[CaseSpec]) -> None:
    """Refuse a plan naming a fault or boundary that does not exist: never a silent no-op."""
    for case in cases:
        for step in case.steps:
            spec = FAULTS.get(step.fault)
            if spec is None:
                raise BadInputError(
                    f"case {case.id!r}: unknown fault {step.fault!r}; known faults: "
                    f"{', '.join(sorted(FAULTS))} (a step is FAULT[@BOUNDARY#HIT][:ARG], "
                    "e.g. crash@BOUNDARY#HIT)"
                )
            if spec.needs_boundary and step.boundary is None:
                raise BadInputError(
                    f"case {case.id!r}: {step.fault} needs a place: {step.fault}@BOUNDARY#HIT"
                )
            if not spec.needs_boundary and step.boundary is not None:
                raise BadInputError(f"case {case.id!r}: {step.fault} takes no @BOUNDARY#HIT")
            if step.boundary is not None and step.boundary not in system.boundaries:
                raise UnknownBoundaryError(step.boundary, system.boundaries)
            if step.arg is not None:
                _check_arg(case, step, spec)


def _check_arg(case: CaseSpec, step: Step, spec: FaultSpec) -> None:
    """A step's ``:ARG`` means what its fault says, or the plan is refused before it runs."""
    assert step.arg is not None
    if spec.check_arg is None:
        raise BadInputError(
            f"case {case.id!r}: step {step}: expected no :ARG ({step.fault} takes none),"
            f" found {step.arg!r}"
        )
    try:
        spec.check_arg(step.arg)
    except ArgError as exc:
        raise BadInputError(
            f"case {case.id!r}: step {step}: expected {exc.expected}, found {exc.found!r}"
        ) from None


def replay_command(settings: CampaignSettings, case: CaseSpec) -> str:
    from harness import _overrides
    from harness.systems import importable_name

    parts = settings.replay_prefix or [
        "crash-harness",
        "certify",
        "--system",
        importable_name(settings.system),
    ]
    parts = [*parts, *_overrides.as_args(settings.replay_overrides)]
    parts = [*parts, "--seed", str(settings.seed), "--case", case.id]
    if settings.db_url is not None:
        url = make_url(settings.db_url).render_as_string(hide_password=True)
        parts += ["--db", _secrets.scrub(url)]  # a ?password= too
    return shlex.join(parts)


def workload_for(settings: CampaignSettings) -> Workload:
    return build_workload(
        settings.seed, runs=settings.runs, destinations_per_topic=settings.destinations_per_topic
    )


class Campaign:
    """One provider process and one supervisor, shared by every case run through it."""

    def __init__(self, settings: CampaignSettings) -> None:
        #: as the caller gave them; ``settings`` becomes this campaign's own copy once its
        #: provider is up (parallel jobs start from these, with providers of their own)
        self.given_settings = settings
        self.settings = settings
        if settings.db_url is not None:
            _secrets.hand_out_url(settings.db_url)
        if settings.db_url is not None and settings.db_url.startswith("postgresql"):
            _db.check_reachable(settings.db_url)
        self.workload = workload_for(settings)
        self.made_workdir = settings.workdir is None
        self.workdir = settings.workdir or _scratch.make_workdir("crash-harness-")
        self.workdir.mkdir(parents=True, exist_ok=True)
        #: the credentials the provider grants; the first is the worker's default
        self.credentials = credentials_mod.grants(settings.credentials, self.workload.roster)
        self.secret = self.credentials[0].secret
        _secrets.hand_out(*(c.secret for c in self.credentials))
        self._stack = contextlib.ExitStack()
        self.provider: ProviderProcess | None = None
        self.supervisor: Supervisor | None = None
        #: every move of this campaign's provider clock, shared by its cases (timelines)
        self.provider_advances: list[tuple[float, float]] = []
        #: why the provider is gone for good (it died and would not restart): every later
        #: case is then reported unknown, not run
        self.provider_gone: str | None = None

    def __enter__(self) -> Campaign:
        # what runs killed before they could clean up left behind (work dirs, case schemas)
        _scratch.sweep_stale()
        if self.settings.db_url is not None and self.settings.db_url.startswith("postgresql"):
            _db.sweep_stale_schemas(self.settings.db_url)
        try:
            self._claim_sqlite()
            preset = self.settings.provider_preset
            if self.settings.provider_window_s is not None and not adapters.takes_window(preset):
                raise BadInputError(f"preset {preset!r} has no dedupe window (window_s)")
            self.provider = self._stack.enter_context(
                ProviderProcess.start(
                    log_path=self.workdir / "provider-effects.sqlite",
                    preset=preset,
                    credentials={
                        c.credential_id: (c.secret, list(c.scope)) for c in self.credentials
                    },
                    window_s=self.settings.provider_window_s,
                    options=self.settings.provider_options,
                )
            )
            _secrets.hand_out(self.provider.admin_token)
            self._speak_preset(preset, self.provider)
            self.supervisor = self._stack.enter_context(Supervisor(workdir=self.workdir))
            _provider_watch.watch(self.provider, self.supervisor)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _claim_sqlite(self) -> None:
        """Hold this run's ledger names on a ``--db`` SQLite file for the campaign's life
        (a parallel job inherits its parent's, and the lock with it)."""
        url = self.settings.db_url
        if url is None or not url.startswith("sqlite") or self.settings.sqlite_stem is not None:
            return
        claim = _db.claim_sqlite(url)
        self._stack.callback(claim.release)
        self.given_settings = replace(self.given_settings, sqlite_stem=claim.stem)
        self.settings = replace(self.settings, sqlite_stem=claim.stem)
        note = claim.note()
        if note is not None:
            print(note, file=sys.stderr, flush=True)

    def _speak_preset(self, preset: str, provider: ProviderProcess) -> None:
        """Tell the workers which API they speak, and restate faults in the preset's terms.

        Only this campaign's copy of the settings changes (the caller's object is untouched):
        the workers get ``provider_preset``/``provider_smtp_port`` (and queue-fifo's 5-minute
        window unless the scenario set one); SMTP gets its fault rules as SMTP reply codes.
        """
        extra: dict[str, Any] = {
            "provider_preset": preset,
            "provider_smtp_port": provider.smtp_port,
        }
        window = adapters.default_window_s(preset)
        settings = self.settings
        if (
            preset != "payments"
            and window is not None
            and settings.provider_window_s is None
            and "key_window_s" not in settings.worker_overrides
        ):
            extra["key_window_s"] = window
        faults = settings.provider_faults
        self.settings = replace(
            settings,
            worker_overrides={**extra, **settings.worker_overrides},
            provider_faults=None if faults is None else adapters.campaign_faults(preset, faults),
        )
        self.workload = replace(
            self.workload,
            provider_faults=adapters.campaign_faults(preset, self.workload.provider_faults),
        )

    def run(self, case: CaseSpec, *, slug_prefix: str = "") -> CaseResult:
        assert self.provider is not None, "use `with Campaign(...)`"
        assert self.supervisor is not None
        validate_cases(self.settings.system, [case])
        # a provider that died between cases (or in the last one, and would not restart
        # then) is restarted on its log before this case opens its epoch; one that will not
        # restart now is gone for good. One that dies as the case opens (before any worker
        # of it ran: a failure past that point is the case's own) is restarted, and the
        # case run again from the start.
        notes: list[str] = []
        for _ in range(OPENING_ATTEMPTS):
            revived = self._revive_provider()
            if revived is not None:
                notes.append(revived)
            if self.provider_gone is not None:
                return not_run(self.settings, case, self.provider_gone)
            try:
                result = run_case(
                    self.settings,
                    case,
                    self.workload,
                    provider=self.provider,
                    supervisor=self.supervisor,
                    secret=self.secret,
                    workdir=self.workdir / slug_prefix if slug_prefix else self.workdir,
                    provider_advances=self.provider_advances,
                    credentials=self.credentials,
                )
            except Exception:
                if _provider_watch.death(self.provider, grace_s=DEATH_GRACE_S) is None:
                    raise
                continue
            result.notes[:0] = notes
            self._follow_smtp_port()
            return result
        name = _provider_watch.name_of(self.provider)
        return not_run(self.settings, case, f"{name} died {OPENING_ATTEMPTS} times as it opened")

    def _revive_provider(self) -> str | None:
        """If the provider is found dead before a case, restart it (a note for that case),
        or record that it is gone for good."""
        assert self.provider is not None
        assert self.supervisor is not None
        if self.provider_gone is not None or self.provider.running:
            return None
        lost = _provider_watch.death(self.provider) or _provider_watch.name_of(self.provider)
        failed = _provider_watch.revive(self.provider, self.supervisor)
        if failed is not None:
            self.provider_gone = f"{lost} and could not be restarted ({failed})"
            return None
        return f"{lost} before this case; restarted on its log (pid {self.provider.pid})"

    def _follow_smtp_port(self) -> None:
        """A restarted SMTP provider that could not have its old port back: workers of the
        next cases get the new one (unless the scenario set it itself)."""
        assert self.provider is not None
        port = self.provider.smtp_port
        overrides = self.settings.worker_overrides
        given = self.given_settings.worker_overrides
        if "provider_smtp_port" in given or overrides.get("provider_smtp_port") == port:
            return
        self.settings = replace(
            self.settings, worker_overrides={**overrides, "provider_smtp_port": port}
        )


def _given_ledger(settings: CampaignSettings, target: _db.DatabaseTarget) -> str | None:
    """The case's ledger file, when it is one the user named with ``--db`` (not a work dir's)."""
    if settings.db_url is None or target.schema is not None:
        return None
    return make_url(target.url).database


def discover_boundaries(settings: CampaignSettings) -> tuple[System, CaseResult]:
    """For a system that does not declare its boundaries (a program): run one fault-free dry
    run and return the system with the boundaries it reached (in flow order), and that run.

    What a certify then crashes is what the program really reaches, never a list it was
    never written against: a boundary it does not have would be a coverage gap it did not
    earn, and one it has but nobody listed would go uncrashed."""
    workdir = _scratch.make_workdir("crash-harness-dry-")
    try:
        dry = replace(settings, cases=[CaseSpec()], workdir=workdir, keep_workdir=False)
        (case,) = run_campaign(dry).cases
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return replace(settings.system, boundaries=tuple(case.reached)), case


def run_campaign(
    settings: CampaignSettings, *, on_case: Callable[[CaseResult], None] | None = None
) -> CampaignResult:
    """Run every case of a campaign against one provider process and one supervisor."""
    cases = settings.cases if settings.cases is not None else default_cases(settings.system)
    validate_cases(settings.system, cases)
    from harness.parallel import run_cases

    with Campaign(settings) as campaign:
        result = CampaignResult(settings=settings, workdir=campaign.workdir)
        result.cases.extend(run_cases(campaign, cases, jobs=settings.jobs, on_case=on_case))
    return finish_campaign(result, campaign)


def finish_campaign(result: CampaignResult, campaign: Campaign) -> CampaignResult:
    """Stamp the end time; drop the work dir if everything passed and nobody asked to keep it."""
    result.finished_at = time.time()
    all_passed = all(c.verdict is Status.PASS for c in result.cases)
    if campaign.made_workdir and all_passed and not campaign.settings.keep_workdir:
        shutil.rmtree(campaign.workdir, ignore_errors=True)
        result.workdir = None
    elif campaign.made_workdir and result.workdir is not None:
        _scratch.keep(result.workdir)  # on purpose: never swept as a killed run's leftovers
    return result


def _explain_raises(ctx: CaseContext, effects: tuple[EffectRow, ...] | None) -> None:
    """A worker that died by raising gets one line (exception, its own frame, the provider
    fault it did not survive) in place of "died with exit code 70"."""
    from harness import _raised

    for o in ctx.outcomes:
        if o.kind is not OutcomeKind.DIED:
            continue
        line = _raised.explain(o.worker, o.stderr_tail, effects)
        if line is None:
            continue
        prefix = f"worker {o.worker} (pid {o.pid}) {o.kind}"
        ctx.notes[:] = [line if n.startswith(prefix) else n for n in ctx.notes]


def run_case(
    settings: CampaignSettings,
    case: CaseSpec,
    workload: Workload,
    *,
    provider: ProviderProcess,
    supervisor: Supervisor,
    secret: str,
    workdir: Path,
    provider_advances: list[tuple[float, float]] | None = None,
    credentials: tuple[credentials_mod.Credential, ...] | None = None,
) -> CaseResult:
    """One case, start to verdict: prepare, drive the fault steps, finish, observe, judge."""
    started = time.time()
    case_dir = workdir / case.slug
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    target = _db.new_target(
        settings.db_url, workdir=case_dir, case_slug=case.slug, stem=settings.sqlite_stem
    )
    system = settings.system
    clock = SharedClock.create(
        str(case_dir / trace_store.CLOCK_FILE), start=start_for_seed(settings.seed)
    )
    ctx: CaseContext | None = None
    try:
        # A SQLite ledger is copied from a template made by the campaign's first case.
        _db.prepare_target(
            target,
            lambda engine: _build_ledger(system, workload, engine),
            template=_ledger_template(workdir, system, workload),
        )
        # what the case holds the system to: its own declared intent, or the workload's
        intended = case_intent(system, workload, target)
        faults = (
            settings.provider_faults
            if settings.provider_faults is not None
            else workload.provider_faults
        )
        window = (
            {"key_window_s": settings.provider_window_s}
            if settings.provider_window_s is not None
            else {}
        )
        overrides = {
            "request_timeout_s": HARNESS_REQUEST_TIMEOUT_S,
            "autojump": True,
            "liveness_grace_s": HARNESS_LIVENESS_GRACE_S,
            **window,
            **settings.worker_overrides,
            **dict(system.config_overrides),
        }
        rules = [FaultRule(**rule) for rule in faults]
        # A new epoch with this case's faults armed, on this case's clock; the workers get
        # the epoch in their provider URL, so nothing they send can count in another case.
        # The steps' own provider rules are armed by their prepare (``add_provider_rule``).
        epoch = provider.admin.reset(rules, clock_path=clock.path)
        grants = credentials or (credentials_mod.Credential("worker", secret, ("*",)),)
        fake_time_file = None
        if settings.lifecycle.fake_time:
            _faketime.library()  # found, and the shim built, here: never inside a worker
            _faketime.shim()
            fake_time_file = case_dir / _faketime.OFFSET_FILE
            _faketime.write_offset(fake_time_file, 0.0)
        base_config = WorkerConfig(
            db=target,
            provider_url=epoch_url(provider.url, epoch),
            credential_id=grants[0].credential_id,
            credential_secret=grants[0].secret,
            destination_scope=grants[0].scope_text,
            credentials=grants if settings.credentials != "shared" else (),
            worker_name="w0",
            clock_path=clock.path,
            fake_time_file=None if fake_time_file is None else str(fake_time_file),
            **overrides,
        )
        ctx = CaseContext(
            system=system,
            workload=workload,
            target=target,
            provider=provider,
            supervisor=supervisor,
            secret=secret,
            case_dir=case_dir,
            clock=clock,
            worker_deadline_s=settings.worker_deadline_s,
            base_config=base_config,
            provider_rules=rules,
            intended=intended,
            provider_advances=provider_advances if provider_advances is not None else [],
            crash_scope=settings.crash_scope,
            settle=settings.settle,
            lifecycle=settings.lifecycle,
            started_at=started,
            provider_epoch=epoch,
        )
        # The case is judged on this epoch, by number, whatever the provider's current
        # epoch is by then (a worker that reset the provider must not hide its effects).
        ctx.record("provider_epoch", epoch=epoch)
        try:
            _drive(ctx, case)
            _drain(ctx, provider, epoch)
        except Exception as exc:  # a worker wait saw the provider end, or a call to it failed
            lost = _provider_watch.death(
                provider, grace_s=0 if isinstance(exc, LifelineCut) else DEATH_GRACE_S
            )
            if lost is None:
                raise
        else:  # it may have died once the workers were done (the drain could not reach it)
            lost = _provider_watch.death(provider)
        if lost is not None:
            _provider_watch.abandon(ctx, case, lost)
        else:
            _check_epoch(ctx, provider, epoch)
        ctx.tear_down()
        policy = Policy(
            key_window_s=base_config.key_window_s,
            retry_backoff_s=base_config.retry_backoff_s,
            max_attempts=base_config.max_attempts,
            lease_s=base_config.lease_s,
            request_timeout_s=base_config.request_timeout_s,
            liveness_grace_s=base_config.liveness_grace_s,
            # what the harness granted the provider, not what the worker says it used
            credential_scopes={c.credential_id: c.scope for c in grants},
            provider_lookup=adapters.has_lookup(settings.provider_preset),
            provider_keys=adapters.takes_window(settings.provider_preset),
            provider_window_s=provider_window_s(provider, settings),
            surface=settings.provider_preset,
        )
        events = trace_store.read(ctx.trace_path)
        # in the order they were started, not the order they happened to end (racers): two
        # runs of one seed report the same workers in the same order
        ctx.outcomes.sort(key=lambda o: _spawn_index(o.worker))
        observation = _observe(
            system, target, ctx.intended, provider, ctx.outcomes, policy, events, epoch=epoch
        )
        observation = replace(
            observation,
            observed_at=clock.now(),
            provider_clock_offset_s=sum(s for _, s in ctx.provider_advances),
        )
        if observation.ledger is not None and observation.ledger.refused is not None:
            ctx.notes.append(observation.ledger.refused)  # why the ledger was not judged
    finally:
        if ctx is not None:
            ctx.tear_down()  # once, however the case ended: the broker's state is the case's
        clock.close()
        _db.drop_target(target)
    _confirm_steps(ctx, case, observation.effects)
    _explain_raises(ctx, observation.effects)
    checks = _after_deadline(_after_anomaly(run_all(observation), ctx.outcomes), events)
    if lost is not None:
        checks = _undecided(checks, lost, f"{lost} during the case", names=checks)
    checks = _after_doubt(checks, epoch, ctx.provider_doubts)
    verdict = _verdict(
        checks,
        ctx.outcomes,
        ctx.steps,
        planned=len(case.steps),
        lost=lost,
        evidence_doubted=bool(ctx.provider_doubts),
    )
    timeline: list[dict[str, Any]] = []
    if verdict is not Status.PASS:  # a picture for every case a person must look at
        from harness.reports import build_timeline

        timeline = build_timeline(
            events,
            observation.effects,
            ledger_events=observation.ledger.audit if observation.ledger else None,
            provider_advances=list(ctx.provider_advances),
        )
    return CaseResult(
        spec=case,
        verdict=verdict,
        invariants=checks,
        workers=ctx.outcomes,
        intended=sum(len(d) for d in ctx.intended.values()),
        accepted=sum(1 for e in observation.effects or () if e.accepted),
        reached=trace_store.boundaries_reached(events),
        hits_by_worker=_hits_by_worker(events),
        # a crash scoped to one process (a work-horse) leaves its worker running
        # a planned SIGKILL happened (a crash scoped to one process, a work-horse, leaves its
        # worker running), and no planned step failed to land
        crash_fired=bool(ctx.steps)
        and all(r.landed for r in ctx.steps)
        and (
            any(o.kind is OutcomeKind.CRASHED_AS_PLANNED for o in ctx.outcomes)
            or any(ev.event == "crash" and ev.worker != "harness" for ev in events)
        ),
        notes=ctx.notes,
        duration_s=time.time() - started,
        replay=replay_command(settings, case),
        timeline=timeline,
        step_records=list(ctx.steps),
        ledger=_given_ledger(settings, target),
        undecided_because=None if lost is None else f"{lost} during the case",
    )


def _drive(ctx: CaseContext, case: CaseSpec) -> None:
    """Prepare and run every planned step, then let fresh workers finish the work."""
    for index, step in enumerate(case.steps):
        prepare = FAULTS[step.fault].prepare
        if prepare is not None:
            ctx.begin_step(index, step)
            prepare(ctx, step)
    for index, step in enumerate(case.steps):
        if ctx.anomalous:
            ctx.skip_step(step, "not run: an earlier worker died or hung on its own")
            continue
        ctx.begin_step(index, step)
        FAULTS[step.fault].run(ctx, step)
        if FAULTS[step.fault].confirm is None:
            ctx.end_step(step)
        else:  # judged from the provider's log once the case is over
            ctx.steps.append(StepRecord(str(step), Landing.UNCONFIRMED, "pending"))
            ctx.begin_step(-1, step)
    ctx.finish()


def not_run(settings: CampaignSettings, case: CaseSpec, why: str) -> CaseResult:
    """A case the campaign could not run (its provider is gone): unknown, never a pass."""
    return CaseResult(
        spec=case,
        verdict=Status.UNKNOWN,
        invariants={},
        workers=[],
        intended=0,
        accepted=0,
        reached={},
        crash_fired=False,
        notes=[f"not run: {why}"],
        duration_s=0.0,
        replay=replay_command(settings, case),
        step_records=[StepRecord(str(s), Landing.NOT_RUN, f"not run: {why}") for s in case.steps],
        undecided_because=f"not run: {why}",
    )


def _confirm_steps(ctx: CaseContext, case: CaseSpec, effects: tuple[EffectRow, ...] | None) -> None:
    """Steps whose evidence is the provider's log (provider faults) are judged now."""
    for index, step in enumerate(case.steps):
        confirm = FAULTS[step.fault].confirm
        if confirm is None or index >= len(ctx.steps):
            continue
        if ctx.steps[index].landing is Landing.NOT_RUN:
            continue
        if effects is None:
            ctx.steps[index] = StepRecord(
                str(step), Landing.UNCONFIRMED, "the provider's effect log could not be read"
            )
            continue
        landed, detail = confirm(ctx, step, index, effects)
        ctx.steps[index] = StepRecord(
            str(step), Landing.LANDED if landed else Landing.UNCONFIRMED, detail
        )
        if not landed:
            ctx.notes.append(f"{step}: not landed: {detail}")


def provider_window_s(provider: ProviderProcess, settings: CampaignSettings) -> float | None:
    """The dedupe window the provider applies: what it reports it runs with (its resolved
    options), else what the harness configured it with; never the worker's ``key_window_s``.

    None when the provider has no window (chat, SMTP) or it cannot be known."""
    try:
        options = provider.admin.info().get("options")
    except Exception:  # the harness's own configuration is still independent of the worker
        options = None
    if isinstance(options, dict) and isinstance(options.get("window_s"), int | float):
        if options.get("dedupe") is False:  # a webhook receiver that dedupes nothing
            return 0.0
        return float(options["window_s"])
    if settings.provider_window_s is not None:
        return settings.provider_window_s
    configured = settings.provider_options.get("window_s")
    if isinstance(configured, int | float):
        return float(configured)
    return adapters.default_window_s(settings.provider_preset)


def epoch_url(url: str, epoch: int) -> str:
    """The provider base URL a case's workers get: its epoch as a path prefix, which the fake
    provider strips and checks (``docs/own-worker.md``)."""
    return f"{url.rstrip('/')}/epoch/{epoch}"


def _check_epoch(ctx: CaseContext, provider: ProviderProcess, epoch: int) -> None:
    """The provider must still be in the epoch the harness opened for the case, and the log
    file must hold exactly what the provider wrote in it. Epochs only grow and only the
    harness resets them, so a newer one means someone else (a worker that found the admin
    API) reset the provider while the case ran; the log is a file any process of the same
    user can edit, and the provider audits it against what it wrote. Either is evidence:
    the case is still judged on its own epoch, but it cannot pass."""
    try:
        audit = provider.admin.audit(epoch)
    except Exception as exc:  # the provider is gone: nothing shows a change
        ctx.notes.append(f"provider epoch {epoch} could not be audited after the case: {exc}")
        return
    current = int(audit.get("current_epoch", epoch))
    if current != epoch:
        ctx.record("provider_epoch_changed", epoch=epoch, current_epoch=current)
        ctx.provider_doubts.append(f"the provider's epoch moved from {epoch} to {current}")
        ctx.notes.append(
            f"the provider's epoch moved from {epoch} (opened by the harness for this case) to"
            f" {current} while the case ran, and the harness reset nothing: something else"
            f" used the provider's admin API; judged on epoch {epoch}, the case cannot pass"
        )
    if audit.get("intact") is False:
        problems = "; ".join(str(p) for p in audit.get("problems") or ())
        ctx.record("provider_log_changed", epoch=epoch, problems=audit.get("problems"))
        ctx.provider_doubts.append(f"the provider's log of epoch {epoch} was changed")
        ctx.notes.append(
            f"the provider's log of epoch {epoch} was changed by something other than the"
            f" provider ({problems}); the case cannot pass"
        )


def _drain(ctx: CaseContext, provider: ProviderProcess, epoch: int) -> None:
    """A case ends when the provider has answered or dropped every request of its epoch."""
    try:
        drained = provider.admin.drain(epoch, timeout_s=DRAIN_TIMEOUT_S)
    except Exception as exc:  # the provider is gone: its log says what it saw
        ctx.notes.append(f"provider drain of epoch {epoch} failed: {exc}")
        return
    if drained.get("waited_for") or not drained.get("drained"):
        ctx.record(
            "provider_drain",
            epoch=epoch,
            drained=drained.get("drained"),
            waited_for=drained.get("waited_for"),
            waited_s=drained.get("waited_s"),
            left=len(drained.get("in_flight") or ()),
        )
    if not drained.get("drained"):
        ctx.notes.append(
            f"provider drain gave up after {DRAIN_TIMEOUT_S}s with "
            f"{len(drained.get('in_flight') or ())} request(s) of epoch {epoch} in flight "
            "(refused when their hold ends, never counted in another case)"
        )


def _build_ledger(system: System, workload: Workload, engine: Engine) -> None:
    system.prepare(engine)
    seed_database(engine, workload)


def _ledger_template(workdir: Path, system: System, workload: Workload) -> Path:
    """Where the campaign keeps its prepared, seeded SQLite ledger: named after what made it."""
    made_by = (
        system.name,
        getattr(system.prepare, "__module__", ""),
        getattr(system.prepare, "__qualname__", ""),
        id(system.prepare),
        repr(workload),
    )
    digest = hashlib.sha256(repr(made_by).encode()).hexdigest()[:16]
    return workdir / f".ledger-template-{digest}.sqlite"


def _observe(
    system: System,
    target: _db.DatabaseTarget,
    intended: dict[str, tuple[str, ...]],
    provider: ProviderProcess,
    outcomes: list[WorkerOutcome],
    policy: Policy,
    events: list[TraceEvent],
    *,
    epoch: int,
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
            for e in provider.admin.effects(epoch=epoch)
        )
    except Exception:
        effects = None
    return Observation(
        intended=intended,
        ledger=ledger,
        effects=effects,
        workers=tuple(o.worker for o in outcomes),
        policy=policy,
        trace=tuple(events),
    )


#: invariants that only mean something if the workers ran to the end; when a worker died on
#: its own or hung, their failure is a consequence of that, and the case is inconclusive
_NEEDS_COMPLETION = frozenset({"no_silent_loss"})


def _after_anomaly(
    checks: dict[str, CheckResult], outcomes: list[WorkerOutcome]
) -> dict[str, CheckResult]:
    """A worker that died or hung on its own leaves work undone: an invariant that needs the
    work finished cannot be judged then, so its failure becomes *unknown*, never a fail."""
    dead = [o for o in outcomes if o.kind in ANOMALIES]
    if not dead:
        return checks
    why = ", ".join(f"{o.worker} {o.kind.value}" for o in dead)
    return _undecided(checks, why, f"the work was never finished ({why})")


def _after_deadline(
    checks: dict[str, CheckResult], events: list[TraceEvent]
) -> dict[str, CheckResult]:
    """Work the system still holds as pending at the settle deadline is late, not lost: by
    its own account it is still there (a message stranded until a visibility timeout).
    ``liveness`` fails for it; an invariant that needs the work finished is *unknown*."""
    deadline = next((ev for ev in events if ev.event == "settle_deadline"), None)
    if deadline is None:
        return checks
    probe = str((deadline.detail or {}).get("probe") or "").strip()
    why = "still pending at the settle deadline" + (f" ({probe})" if probe else "")
    return _undecided(checks, why, f"the work was {why}, not given up by the system")


def _after_doubt(
    checks: dict[str, CheckResult], epoch: int, doubts: list[str]
) -> dict[str, CheckResult]:
    """Someone other than the harness reset the provider or edited its log during the case
    (``_check_epoch``): a process of the case reached what the verdict rests on, so no
    invariant passes. Each pass becomes *unknown*, its own judgement (on the case's epoch,
    by number) kept in the summary; a failure stands."""
    if not doubts:
        return checks
    why = "; ".join(doubts) + ", not by the harness"
    out = dict(checks)
    for name, check in checks.items():
        if check.status is Status.PASS:
            out[name] = CheckResult(
                Status.UNKNOWN,
                f"{name} could not decide: {why}; as judged on epoch {epoch}: {check.summary}",
                {**check.evidence, "undecided_because": why},
            )
    return out


def _undecided(
    checks: dict[str, CheckResult],
    why: str,
    said: str,
    *,
    names: Iterable[str] = _NEEDS_COMPLETION,
) -> dict[str, CheckResult]:
    """Every failed invariant of ``names`` (by default those that need the work finished),
    turned *unknown* because of ``why`` (kept in its evidence), its own judgement kept in
    the summary."""
    out = dict(checks)
    for name in list(names):
        check = out.get(name)
        if check is not None and check.status is Status.FAIL:
            out[name] = CheckResult(
                Status.UNKNOWN,
                f"{name} could not decide: {said}; as judged: {check.summary}",
                {**check.evidence, "undecided_because": why},
            )
    return out


def _verdict(
    checks: dict[str, CheckResult],
    outcomes: list[WorkerOutcome],
    steps: list[StepRecord] | None = None,
    *,
    planned: int = 0,
    lost: str | None = None,
    evidence_doubted: bool = False,
) -> Status:
    """The case's verdict: a broken invariant first, then a case whose provider was lost
    (undecided, whatever its steps did), then a planned step that did not land (a gap: never
    a pass), then anything undecided, then pass. ``evidence_doubted`` (the provider's epoch or
    log was changed by someone other than the harness) makes a would-be pass undecided: a
    failure judged on the case's epoch still stands."""
    if any(c.status is Status.FAIL for c in checks.values()):
        return Status.FAIL
    if lost is not None:
        return Status.UNKNOWN
    records = steps or []
    missed = [r for r in records if r.landing in (Landing.NOT_REACHED, Landing.UNCONFIRMED)]
    if missed or (len(records) < planned and not any(o.kind in ANOMALIES for o in outcomes)):
        return Status.GAP
    undecided = [
        c
        for c in checks.values()
        if c.status is Status.UNKNOWN and not c.summary.startswith(NOT_JUDGED)
    ]
    if any(o.kind in ANOMALIES for o in outcomes) or undecided or evidence_doubted:
        return Status.UNKNOWN
    return Status.PASS


def _spawn_index(worker: str) -> tuple[int, str]:
    """``w3`` -> 3: the harness names a case's workers in the order it starts them."""
    digits = worker[1:]
    return (int(digits), worker) if worker[:1] == "w" and digits.isdigit() else (1 << 30, worker)


def _hits_by_worker(events: list[TraceEvent]) -> dict[str, dict[str, int]]:
    hits: dict[str, dict[str, int]] = {}
    for ev in events:
        if ev.boundary is not None and ev.hit is not None:
            counts = hits.setdefault(ev.worker, {})
            counts[ev.boundary] = max(counts.get(ev.boundary, 0), ev.hit)
    return hits
