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
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from fake_providers import FaultRule, ProviderProcess
from harness.clock import SharedClock, start_for_seed
from harness.engine.case import _provider_watch
from harness.engine.case._context import ANOMALIES, CaseContext
from harness.engine.case._provider_reasons import reason_notes
from harness.engine.plan import _glue
from harness.engine.plan import credentials as credentials_mod
from harness.engine.plan._plan import default_cases, validate_cases
from harness.engine.plan._providers import ProviderSpec, comparison_surface
from harness.engine.plan.schedule import CaseSpec, Step
from harness.engine.plan.workload import Workload, build_workload, case_intent, seed_database
from harness.engine.process import _faketime, _far_side, _leftovers
from harness.engine.process._lifeline import LifelineCut
from harness.engine.process.supervisor import OutcomeKind, Supervisor, WorkerOutcome
from harness.engine.results import (
    CampaignResult,
    CampaignSettings,
    CaseResult,
    Landing,
    StepRecord,
)
from harness.engine.store import _db, _room, _scratch, _secrets
from harness.engine.store import trace as trace_store
from harness.engine.store.trace import TraceEvent
from harness.errors import BadInputError, GlueError, HarnessError
from harness.faults import FAULTS
from harness.faults.provider import pin_workload_rules
from harness.intake import INTAKE_ROSTER
from harness.invariants import CheckResult, EffectRow, Observation, Policy, Status, looks, run_all
from harness.invariants._attribution import attribute
from harness.invariants._model import ProviderPolicy
from harness.invariants.no_unintended_effect import tally
from harness.names import near_side_kind
from harness.presets import PresetFacts, campaign_faults, facts_for
from harness.systems import System
from harness.worker_config import ProviderEndpoint, WorkerConfig

#: a reply slower than this is an unknown outcome (kept short: timeouts are part of the tests)
HARNESS_REQUEST_TIMEOUT_S = 1.0
#: wall seconds a due delivery may sit untouched before the watchdog calls it overdue
HARNESS_LIVENESS_GRACE_S = 0.5
#: how long a case waits, once its workers are done, for the provider to answer or drop every
#: request of the case's epoch (a held reply) before it is observed
DRAIN_TIMEOUT_S = 10.0
#: the longest one server-side drain wait lasts before the providers' heartbeats are looked
#: at again (a stopped provider answers no drain: its read time-out is this plus a margin)
DRAIN_SLICE_S = 2.0
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


def replay_command(settings: CampaignSettings, case: CaseSpec) -> str:
    from harness.engine.plan import _overrides
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
        if settings.system.templates is not None:  # a program's own settings, fillable here
            settings.system.templates.check_campaign(
                database="postgresql"
                if (settings.db_url or "").startswith("postgresql")
                else "sqlite",
                providers=[spec.name for spec in settings.provider_specs()],
            )
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
        #: every provider by name, the first being ``provider`` (``[provider.NAME]``)
        self.providers: dict[str, ProviderProcess] = {}
        #: provider name -> its fault rules as its preset understands them (the scenario's,
        #: else the workload's default faults)
        self.provider_faults: dict[str, tuple[dict[str, Any], ...]] = {}
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
            supports = self.settings.system.speaks
            for index, spec in enumerate(self.settings.provider_specs()):
                preset = spec.preset
                if supports is not None and preset not in supports:
                    raise BadInputError(
                        f"system {self.settings.system.name!r} speaks presets"
                        f" {', '.join(supports)}, not {preset!r} (provider {spec.name!r})"
                    )
                facts = facts_for(preset, self.settings.system.presets)
                if spec.window_s is not None and not facts.keyed:
                    raise BadInputError(f"preset {preset!r} has no dedupe window (window_s)")
                tail = "" if index == 0 else f"-{spec.name}"
                log = f"provider-effects{tail}.sqlite"
                provider = self._stack.enter_context(
                    ProviderProcess.start(
                        log_path=self.workdir / log,
                        preset=preset,
                        credentials={
                            c.credential_id: (c.secret, list(c.scope)) for c in self.credentials
                        },
                        window_s=spec.window_s,
                        options=spec.options,
                    )
                )
                _provider_watch.name(provider, spec.name)
                _secrets.hand_out(provider.admin_token)
                self.providers[spec.name] = provider
                given = spec.faults if spec.faults is not None else self.workload.provider_faults
                self.provider_faults[spec.name] = campaign_faults(facts, given)
            self.provider = next(iter(self.providers.values()))
            self._speak_preset(self.settings.provider_preset, self.provider)
            self.supervisor = self._stack.enter_context(Supervisor(workdir=self.workdir))
            for provider in self.providers.values():
                _provider_watch.watch(provider, self.supervisor)
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
        facts = preset_facts(self.settings)
        window = facts.window_s
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
            provider_faults=None if faults is None else campaign_faults(facts, faults),
        )
        self.workload = replace(
            self.workload,
            provider_faults=campaign_faults(facts, self.workload.provider_faults),
        )

    def adopt_discovered(self, dry: CaseResult) -> System:
        """After the dry run ``dry`` of a discovering system (``System.discover``): its
        points found there (a program's boundaries, every near-side point) become the
        system's boundaries for every case and job of this campaign, and for its report."""
        system = self.settings.system
        if system.discover:
            system = replace(system, boundaries=with_discovered(system, dry))
            for settings in {id(s): s for s in (self.settings, self.given_settings)}.values():
                settings.system = system
        return system

    def run(self, case: CaseSpec, *, slug_prefix: str = "") -> CaseResult:
        assert self.provider is not None, "use `with Campaign(...)`"
        assert self.supervisor is not None
        validate_cases(self.settings.system, [case], list(self.providers))
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
                    providers=self.providers,
                    faults_by_provider=self.provider_faults,
                )
            except Exception as exc:
                cannot = _room.cannot_write(exc)
                if cannot is not None:  # the machine's failure, never the worker's
                    self.supervisor.kill_live()
                    return not_run(self.settings, case, cannot, ran=True)
                providers = list(self.providers.values())
                if _provider_watch.first_loss(providers, grace_s=DEATH_GRACE_S) is None:
                    raise
                continue
            result.notes[:0] = notes
            self._follow_smtp_port()
            return result
        dead = [p for p in self.providers.values() if not p.running] or [self.provider]
        name = _provider_watch.name_of(dead[0])
        return not_run(self.settings, case, f"{name} died {OPENING_ATTEMPTS} times as it opened")

    def _revive_provider(self) -> str | None:
        """If a provider is found dead, stopped or hung before a case, restart it (a note for
        that case), or record that it is gone for good."""
        assert self.provider is not None
        assert self.supervisor is not None
        said: list[str] = []
        for provider in self.providers.values():
            if self.provider_gone is not None:
                continue
            lost = _provider_watch.death(provider) or _provider_watch.stall(provider, settle=True)
            if lost is None and provider.running:
                continue
            lost = lost or _provider_watch.name_of(provider)
            failed = _provider_watch.revive(provider, self.supervisor)
            if failed is not None:
                self.provider_gone = f"{lost} and could not be restarted ({failed})"
                return None
            said.append(f"{lost} before this case; restarted on its log (pid {provider.pid})")
        return "; ".join(said) or None

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
    """For a system that does not declare its boundaries (a program), or one that discovers
    its near-side points (``System.discover``): run one fault-free dry run and return the
    system with the boundaries it reached (in flow order), and that run.

    What a certify then crashes is what the program really reaches, never a list it was
    never written against: a boundary it does not have would be a coverage gap it did not
    earn, and one it has but nobody listed would go uncrashed. A system that declares its
    boundaries keeps them, and gains the near-side points the dry run found."""
    workdir = _scratch.make_workdir("crash-harness-dry-")
    try:
        dry = replace(settings, cases=[CaseSpec()], workdir=workdir, keep_workdir=False)
        (case,) = run_campaign(dry).cases
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return replace(settings.system, boundaries=with_discovered(settings.system, case)), case


def with_discovered(system: System, dry: CaseResult) -> tuple[str, ...]:
    """The boundaries to crash ``system`` at after its dry run ``dry``: every one it reached
    when it declares none; else its own, then the near-side points the dry run found."""
    if not system.boundaries:
        return tuple(dry.reached)
    found = [b for b in dry.reached if near_side_kind(b) and b not in system.boundaries]
    return (*system.boundaries, *found)


def run_campaign(
    settings: CampaignSettings, *, on_case: Callable[[CaseResult], None] | None = None
) -> CampaignResult:
    """Run every case of a campaign against one provider process and one supervisor."""
    names = [spec.name for spec in settings.provider_specs()]
    cases = settings.cases if settings.cases is not None else default_cases(settings.system, names)
    validate_cases(settings.system, cases, names)
    from harness.engine.case.parallel import run_cases

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
    from harness.engine.case import _raised

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
    providers: dict[str, ProviderProcess] | None = None,
    faults_by_provider: dict[str, tuple[dict[str, Any], ...]] | None = None,
) -> CaseResult:
    """One case, start to verdict: prepare, drive the fault steps, finish, observe, judge.

    ``providers``: every provider of the campaign by name, ``provider`` first (None: that
    one alone); each gets its own epoch, faults, drain and audit."""
    specs = {spec.name: spec for spec in settings.provider_specs()}
    first_name = next(iter(specs))
    named = dict(providers) if providers else {first_name: provider}
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
    leftovers: list[_leftovers.Leftover] = []
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
        rules = _case_rules(faults, case, workload.seed, intended, provider=first_name)
        # A new epoch with this case's faults armed, on this case's clock; the workers get
        # the epoch in their provider URL, so nothing they send can count in another case.
        # The steps' own provider rules are armed by their prepare (``add_provider_rule``).
        # Every other provider gets its own epoch and its own faults the same way.
        rules_by: dict[str, list[FaultRule]] = {first_name: rules}
        epochs: dict[str, int] = {}
        for name, each in named.items():
            if name != first_name:
                given = (faults_by_provider or {}).get(name, workload.provider_faults)
                rules_by[name] = _case_rules(given, case, workload.seed, intended, provider=name)
            epochs[name] = each.admin.reset(rules_by[name], clock_path=clock.path)
        epoch = epochs[first_name]
        grants = credentials or (credentials_mod.Credential("worker", secret, ("*",)),)
        endpoints = {
            name: ProviderEndpoint(
                name=name,
                preset=specs[name].preset if name in specs else each.preset,
                url=epoch_url(each.url, epochs[name]),
                smtp_port=each.smtp_port,
                credential_id=grants[0].credential_id,
                credential=grants[0].secret,
            )
            for name, each in named.items()
        }
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
            providers=endpoints,
            case_id=case.id,
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
            case=case,
            providers=named if len(named) > 1 else {},
            provider_epochs=epochs,
            rules_by_provider=rules_by,
        )
        # The case is judged on this epoch, by number, whatever the provider's current
        # epoch is by then (a worker that reset the provider must not hide its effects).
        if len(named) == 1:
            ctx.record("provider_epoch", epoch=epoch)
        else:
            for name, opened in epochs.items():
                ctx.record("provider_epoch", epoch=opened, provider=name)
        every = list(named.values())
        found: tuple[str, ProviderProcess] | None
        try:
            _drive(ctx, case)
            for name, each in named.items():
                _drain(ctx, each, epochs[name], every)
        except Exception as exc:  # a worker wait saw the provider end or stop answering, or
            # a call to it failed
            found = _provider_watch.first_loss(
                every, grace_s=0 if isinstance(exc, LifelineCut) else DEATH_GRACE_S
            )
            if isinstance(exc, LifelineCut) and exc.how is not None:
                cut = next((p for p in every if p.running and p.pid == exc.pid), None)
                found = (exc.how, cut) if cut is not None and found is None else found
            if found is None:
                raise
        else:  # it may have died or stopped once the workers were done
            found = _provider_watch.first_loss(every)
        if found is None:
            try:
                _after_the_case(ctx, named, epochs)
            except ProviderStalled:  # it stopped answering as the case was read
                found = _provider_watch.first_loss(every)
        lost = None if found is None else found[0]
        if found is not None:
            _provider_watch.abandon(ctx, case, found[0], found[1])
        leftovers = _case_leftovers(ctx, named)
        ctx.tear_down()
        presets = [specs[n].preset if n in specs else p.preset for n, p in named.items()]
        policy = Policy(
            key_window_s=base_config.key_window_s,
            retry_backoff_s=base_config.retry_backoff_s,
            max_attempts=base_config.max_attempts,
            lease_s=base_config.lease_s,
            request_timeout_s=base_config.request_timeout_s,
            liveness_grace_s=base_config.liveness_grace_s,
            # what the harness granted the provider, not what the worker says it used
            credential_scopes={c.credential_id: c.scope for c in grants},
            provider_lookup=preset_facts(settings).lookup,
            provider_keys=preset_facts(settings).keyed,
            provider_window_s=provider_window_s(provider, settings),
            surface=comparison_surface(presets),
            providers=tuple(named) if len(named) > 1 else (),
            per_provider=_per_provider(settings, named) if len(named) > 1 else {},
        )
        events = trace_store.read(ctx.trace_path)
        # in the order they were started, not the order they happened to end (racers): two
        # runs of one seed report the same workers in the same order
        ctx.outcomes.sort(key=lambda o: _spawn_index(o.worker))
        observation = _observe(
            system,
            target,
            ctx.intended,
            {name: (each, epochs[name]) for name, each in named.items()},
            ctx.outcomes,
            policy,
            events,
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
    # the harness's own disk full at the end: whatever failed may be its doing, not the
    # worker's (a ledger write refused for want of room): nothing in the case is decided
    because = [] if lost is None else [f"{lost} during the case"]
    full = _room.full(case_dir)
    if full is not None:
        because.append(full)
        checks = _undecided(checks, full, full, names=checks)
        ctx.notes.append(full)
    verdict = _verdict(
        checks,
        ctx.outcomes,
        ctx.steps,
        planned=len(case.steps),
        lost=lost or full,
        evidence_doubted=bool(ctx.provider_doubts),
        left_behind=bool(leftovers),
    )
    timeline: list[dict[str, Any]] = []
    if verdict is not Status.PASS:  # a picture for every case a person must look at
        from harness.engine.store.timeline import build_timeline

        timeline = build_timeline(
            events,
            observation.effects,
            ledger_events=observation.ledger.audit if observation.ledger else None,
            provider_advances=list(ctx.provider_advances),
        )
    placement = _placement(observation)
    return CaseResult(
        spec=case,
        verdict=verdict,
        invariants=checks,
        workers=ctx.outcomes,
        intended=sum(len(d) for d in ctx.intended.values()),
        accepted=sum(1 for e in observation.effects or () if e.accepted),
        on_intended=placement[0],
        unintended=placement[1],
        reached=_with_far_side(trace_store.boundaries_reached(events), observation.effects),
        targets=trace_store.point_targets(events),
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
        undecided_because="; ".join(because) or None,
        by_provider=_by_provider(list(named), observation) if len(named) > 1 else {},
        fault_targets=fault_targets(observation.effects, several=len(named) > 1),
        seq_base=_seq_base(observation.effects, list(named) if len(named) > 1 else [""]),
        trace=str(ctx.trace_path),
        leftovers=leftovers,
    )


def fault_targets(effects: Iterable[EffectRow] | None, *, several: bool) -> list[dict[str, Any]]:
    """Each request a provider fault met: the fault, its (run, destination) and what became
    of it (and which provider, with several), sorted: the same list on every run of one
    seed, whatever order a race sent the requests in."""
    found = [
        {
            **({"provider": e.provider} if several else {}),
            "fault": e.fault,
            "run_id": e.run_id,
            "destination": e.destination,
            "outcome": e.outcome,
        }
        for e in effects or ()
        if e.fault
    ]
    return sorted(found, key=lambda t: tuple(str(v) for v in t.values()))


def _seq_base(effects: Iterable[EffectRow] | None, names: list[str]) -> dict[str, int]:
    """Each provider's number before the case's first record (``CaseResult.seq_base``)."""
    rows = list(effects or ())
    bases = {}
    for name in names:
        own = [e.seq for e in rows if not name or e.provider == name]
        if own:
            bases[name] = min(own) - 1
    return bases


def _case_rules(
    given: Iterable[dict[str, Any]],
    case: CaseSpec,
    seed: int,
    intended: dict[str, tuple[str, ...]],
    *,
    provider: str,
) -> list[FaultRule]:
    """The workload's fault rules for one provider in this case: as written, or in a case
    whose workers race, pinned to deliveries the seed picks (``pin_workload_rules``), so no
    rule picks its target by the order the race put the sends in."""
    rules = [FaultRule(**rule) for rule in given]
    if not case.races:
        return rules
    return pin_workload_rules(
        rules,
        seed=seed,
        case_id=case.id,
        intended=intended,
        roster_may_change=any(s.fault == "roster_change" for s in case.steps),
        provider=provider,
    )


def _case_leftovers(
    ctx: CaseContext, named: dict[str, ProviderProcess]
) -> list[_leftovers.Leftover]:
    """Once every worker of the case has ended: what each left in its tree (named as it was
    killed), and whatever of the case still runs now, found as an orphan handed to the
    harness or by a connection it holds to a provider of the case; all of it stopped here,
    before the next case opens (``harness.engine.process._leftovers``)."""
    found = [p for o in ctx.outcomes for p in o.left]
    supervisor = ctx.supervisor
    if supervisor.live_pids:  # a worker the case could not end: not a leftover, an anomaly
        return found
    now = supervisor.escaped("outlived its case (an orphan of its workers)")
    ports: dict[int, str] = {}
    for name, each in named.items():
        port = urlsplit(each.url).port
        if port is not None:
            ports[port] = name
        if each.smtp_port is not None:
            ports[each.smtp_port] = name
    known = supervisor.known_pids() | {p.pid for p in named.values()}
    for pid, held in _leftovers.clients(ports, known).items():
        said = "outlived its case, holding " + ", ".join(held)
        now[pid] = f"{now[pid]}, holding {', '.join(held)}" if pid in now else said
    stopped = _leftovers.collect(now)
    for left in stopped:
        ctx.record("leftover", leftover_pid=left.pid, command=left.command, held=left.held)
    return found + stopped


def _per_provider(
    settings: CampaignSettings, named: dict[str, ProviderProcess]
) -> dict[str, ProviderPolicy]:
    """Each provider's own promise (keys, lookup, window), for checkers that judge by it."""
    specs = {spec.name: spec for spec in settings.provider_specs()}
    out = {}
    for name, each in named.items():
        spec = specs.get(name) or ProviderSpec(name=name, preset=each.preset)
        out[name] = ProviderPolicy(
            keys=facts_for(spec.preset, settings.system.presets).keyed,
            lookup=facts_for(spec.preset, settings.system.presets).lookup,
            window_s=provider_window_s(each, settings, spec),
        )
    return out


def _placement(observation: Observation) -> tuple[int | None, int | None]:
    """How many accepted effects lie on an intended delivery, and how many went to an
    intended recipient under a run or delivery nobody intended (None: the logs were not
    read, nothing was counted)."""
    if observation.effects is None:
        return None, None
    counts = tally(observation).values()
    return sum(c["on_intended"] for c in counts), sum(c["unintended"] for c in counts)


def _by_provider(names: list[str], observation: Observation) -> dict[str, dict[str, int]]:
    """Each provider's share of the case's effects: accepted, every request it logged, and of
    the accepted those on an intended delivery and those nobody intended."""
    zero = {"accepted": 0, "requests": 0, "on_intended": 0, "unintended": 0}
    out = {name: dict(zero) for name in names}
    for eff in observation.effects or ():
        counts = out.setdefault(eff.provider, dict(zero))
        counts["requests"] += 1
        counts["accepted"] += int(eff.accepted)
    for name, placed in tally(observation).items():
        out.setdefault(name, dict(zero)).update(placed)
    return out


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


def not_run(
    settings: CampaignSettings, case: CaseSpec, why: str, *, ran: bool = False
) -> CaseResult:
    """A case the campaign could not run (its provider is gone), or gave up (``ran``: the
    harness could not write): unknown, never a pass."""
    said = f"{'given up' if ran else 'not run'}: {why}"
    return CaseResult(
        spec=case,
        verdict=Status.UNKNOWN,
        invariants={},
        workers=[],
        intended=0,
        accepted=0,
        reached={},
        crash_fired=False,
        notes=[said],
        duration_s=0.0,
        replay=replay_command(settings, case),
        step_records=[StepRecord(str(s), Landing.NOT_RUN, said) for s in case.steps],
        # a case given up names the harness's own failure as it is; one never run says so
        undecided_because=why if ran else said,
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


def provider_window_s(
    provider: ProviderProcess, settings: CampaignSettings, spec: ProviderSpec | None = None
) -> float | None:
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
    spec = spec or settings.provider_specs()[0]
    if spec.window_s is not None:
        return spec.window_s
    configured = spec.options.get("window_s")
    if isinstance(configured, int | float):
        return float(configured)
    return facts_for(spec.preset, settings.system.presets).window_s


def preset_facts(settings: CampaignSettings) -> PresetFacts:
    """What the campaign's system declares of its provider preset (``harness.presets``)."""
    return facts_for(settings.provider_preset, settings.system.presets)


def epoch_url(url: str, epoch: int) -> str:
    """The provider base URL a case's workers get: its epoch as a path prefix, which the fake
    provider strips and checks (``docs/own-worker.md``)."""
    return f"{url.rstrip('/')}/epoch/{epoch}"


def _check_epoch(
    ctx: CaseContext,
    provider: ProviderProcess,
    epoch: int,
    every: list[ProviderProcess] | None = None,
) -> None:
    """The provider must still be in the epoch the harness opened for the case, and the log
    file must hold exactly what the provider wrote in it. Epochs only grow and only the
    harness resets them, so a newer one means someone else (a worker that found the admin
    API) reset the provider while the case ran; the log is a file any process of the same
    user can edit, and the provider audits it against what it wrote. Either is evidence:
    the case is still judged on its own epoch, but it cannot pass."""
    who = "the provider's" if not ctx.providers else f"{_provider_watch.name_of(provider)}'s"
    try:
        audit = provider.admin.audit(epoch)
    except Exception as exc:  # the provider is gone: nothing shows a change
        _stalled(every or [provider])  # or it stopped answering: the case is lost with it
        ctx.notes.append(f"provider epoch {epoch} could not be audited after the case: {exc}")
        return
    current = int(audit.get("current_epoch", epoch))
    if current != epoch:
        ctx.record("provider_epoch_changed", epoch=epoch, current_epoch=current)
        ctx.provider_doubts.append(f"{who} epoch moved from {epoch} to {current}")
        ctx.notes.append(
            f"{who} epoch moved from {epoch} (opened by the harness for this case) to"
            f" {current} while the case ran, and the harness reset nothing: something else"
            f" used the provider's admin API; judged on epoch {epoch}, the case cannot pass"
        )
    if audit.get("intact") is False:
        problems = "; ".join(str(p) for p in audit.get("problems") or ())
        ctx.record("provider_log_changed", epoch=epoch, problems=audit.get("problems"))
        ctx.provider_doubts.append(f"{who} log of epoch {epoch} was changed")
        ctx.notes.append(
            f"{who} log of epoch {epoch} was changed by something other than the"
            f" provider ({problems}); the case cannot pass"
        )


def _drain(
    ctx: CaseContext,
    provider: ProviderProcess,
    epoch: int,
    every: list[ProviderProcess] | None = None,
) -> None:
    """A case ends when the provider has answered or dropped every request of its epoch.

    With every worker reaped, no sender of the epoch is left to receive a reply the provider
    still holds after processing (a ``provider_slow`` past the worker's timeout): the drain
    says so and those replies go at once, instead of the case waiting out the rest of the
    hold. Their effects are in the log already; a request held *before* processing
    (``provider_hold``) is still waited for, as its effect lands when the hold ends.

    The wait is made in server-side slices of ``DRAIN_SLICE_S``, and the providers'
    heartbeats are looked at before each: a provider that stopped answering is lost within
    a slice (``ProviderStalled``), never after the whole drain's read time-out."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        _stalled(every or [provider])
        left = max(0.0, deadline - time.monotonic())
        try:
            drained = provider.admin.drain(
                epoch,
                timeout_s=min(left, DRAIN_SLICE_S),
                senders_gone=not ctx.supervisor.live_pids,
            )
        except Exception as exc:  # the provider is gone: its log says what it saw
            _stalled(every or [provider])
            ctx.notes.append(f"provider drain of epoch {epoch} failed: {exc}")
            return
        if drained.get("drained") or left <= DRAIN_SLICE_S:
            break
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


def _after_the_case(
    ctx: CaseContext, named: dict[str, ProviderProcess], epochs: dict[str, int]
) -> None:
    """Each provider's audit of the case's epoch, and its reasons for what it refused, as
    notes; ``ProviderStalled`` if a call failed because a provider stopped answering."""
    every = list(named.values())
    for name, each in named.items():
        _stalled(every)
        _check_epoch(ctx, each, epochs[name], every)
        try:
            said = name if len(named) > 1 else None
            ctx.notes.extend(reason_notes(each.admin.effects(epoch=epochs[name]), said))
        except Exception:  # the notes are a courtesy, never a verdict
            _stalled(every)


class ProviderStalled(Exception):
    """A provider stopped answering while the harness talked to it (``_stalled``)."""


def _stalled(providers: list[ProviderProcess]) -> None:
    """``ProviderStalled`` if any of ``providers`` is stopped or hung (its heartbeat)."""
    for provider in providers:
        how = _provider_watch.stall(provider)
        if how is not None:
            raise ProviderStalled(how)


def _build_ledger(system: System, workload: Workload, engine: Engine) -> None:
    _glue.call(f"system {system.name!r}: its prepare", system.prepare, engine)
    seed_database(engine, workload, system.roster or INTAKE_ROSTER)


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
    providers: dict[str, tuple[ProviderProcess, int]],
    outcomes: list[WorkerOutcome],
    policy: Policy,
    events: list[TraceEvent],
) -> Observation:
    """What the case left: the ledger, and every provider's effects of its own epoch, each
    tagged with the provider's name (None when any log could not be read: a checker then
    answers unknown, never a pass on half the evidence)."""
    try:
        engine = target.engine()
        try:
            ledger = system.read_ledger(engine)
        finally:
            engine.dispose()
    except SQLAlchemyError:  # the worker's database as it left it: the checkers say unknown
        ledger = None
    except HarnessError:
        raise
    except Exception as exc:  # a bug in the user's adapter is theirs, not the worker's
        raise GlueError(_glue.describe(f"system {system.name!r}: its read_ledger", exc)) from exc
    effects: tuple[EffectRow, ...] | None = ()
    try:
        for name, (provider, epoch) in providers.items():
            effects = _effects_of(name, provider, epoch, effects or ())
    except Exception:
        effects = None
    # a request the provider's rule could not tie to a delivery is tied by the intent where
    # it can be, never lumped under an empty id (harness.invariants._attribution)
    return attribute(
        Observation(
            intended=intended,
            ledger=ledger,
            effects=effects,
            workers=tuple(o.worker for o in outcomes),
            policy=policy,
            trace=tuple(events),
        )
    )


def _effects_of(
    name: str, provider: ProviderProcess, epoch: int, before: tuple[EffectRow, ...]
) -> tuple[EffectRow, ...]:
    return before + tuple(
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
            provider=name,
            unattributed=e.reason if e.unattributed else None,
            body_hash=e.body_hash,
            retry_after_s=None if e.retry_after is None else float(e.retry_after),
        )
        for e in provider.admin.effects(epoch=epoch)
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
    left_behind: bool = False,
) -> Status:
    """The case's verdict: a broken invariant first, then a case whose provider was lost
    (undecided, whatever its steps did), then a planned step that did not land (a gap: never
    a pass), then anything undecided, then pass. ``evidence_doubted`` (the provider's epoch or
    log was changed by someone other than the harness) makes a would-be pass undecided: a
    failure judged on the case's epoch still stands. ``left_behind`` (a process of the case
    outlived its worker or the case, ``_leftovers``) makes a would-be pass undecided too:
    what it did after is not known; it is never a failure on that ground alone."""
    if any(c.status is Status.FAIL for c in checks.values()):
        return Status.FAIL
    if lost is not None:
        return Status.UNKNOWN
    records = steps or []
    missed = [r for r in records if r.landing in (Landing.NOT_REACHED, Landing.UNCONFIRMED)]
    if missed or (len(records) < planned and not any(o.kind in ANOMALIES for o in outcomes)):
        return Status.GAP
    undecided = [c for c in checks.values() if looks.look(c) == "undecided"]
    if any(o.kind in ANOMALIES for o in outcomes) or undecided or evidence_doubted:
        return Status.UNKNOWN
    if left_behind:
        return Status.UNKNOWN
    return Status.PASS


def _with_far_side(
    reached: dict[str, int], effects: tuple[EffectRow, ...] | None
) -> dict[str, int]:
    """``reached`` plus every provider's far-side point: each accepted effect of provider
    NAME in the case's epoch is a hit of ``accepted.NAME`` (a held one included, so the
    crash line the harness wrote there is not counted twice)."""
    out = {b: n for b, n in reached.items() if not _far_side.is_far_side(b)}
    for eff in effects or ():
        if eff.accepted:
            point = _far_side.point(eff.provider)
            out[point] = out.get(point, 0) + 1
    return out


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
