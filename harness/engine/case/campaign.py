"""Run a campaign: its providers up, then case after case through the case's stages.

A case is a schedule of fault steps (or none: the baseline). Every case gets its own database
(a SQLite file, a PostgreSQL schema, or a PostgreSQL database of its own), its own shared
clock and its own provider epoch, so cases never see each other's rows or effects, and any
case can be replayed alone from its seed and id. Its life is a pipeline (``prepare``,
``run``, ``observe``, ``judge``, ``record``, one module each); ``run_case`` only sequences
them, and ``Campaign`` only keeps what every case shares (the providers, the supervisor) and
runs cases through them.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fake_providers import ProviderProcess
from harness.engine.case import _provider_watch, judge, observe, prepare, record, run
from harness.engine.case.observe import preset_facts
from harness.engine.case.record import not_run
from harness.engine.case.run import DEATH_GRACE_S
from harness.engine.plan import credentials as credentials_mod
from harness.engine.plan._plan import default_cases, validate_cases
from harness.engine.plan.schedule import CaseSpec, Step
from harness.engine.plan.workload import Workload, build_workload
from harness.engine.process import _pg_cluster, _redis_server
from harness.engine.process._warm import Warmth
from harness.engine.process.supervisor import Supervisor
from harness.engine.results import CampaignResult, CampaignSettings, CaseResult
from harness.engine.store import _db, _outage, _pgdb, _room, _scratch, _secrets
from harness.errors import BadInputError
from harness.invariants import Status
from harness.names import near_side_kind
from harness.presets import campaign_faults, facts_for
from harness.systems import System

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
        self.server: _pg_cluster.Cluster | None = None
        if restarts_server(settings):
            # made here, before anything reads db_url; removed when the campaign ends
            # (a forked job makes its own: the server restarted must be its own child)
            self.server = own_server(settings)
            settings = replace(settings, db_url=self.server.url, db_server="throwaway")
        try:
            self._init(settings)
        except BaseException:
            stack = getattr(self, "_stack", None)
            if stack is not None:  # the server and the broker are on it
                stack.close()
            elif self.server is not None:
                self.server.remove()
            raise

    def _init(self, settings: CampaignSettings) -> None:
        self.settings = settings
        restarts_broker = any(
            step.fault == "broker_restart" for case in settings.cases or () for step in case.steps
        )
        if restarts_broker and settings.broker is None:
            raise BadInputError(
                "broker_restart restarts the Redis broker the harness starts for a scenario"
                ' with a [broker] table (persistence = "none" or "aof"); this one has none'
                " (a broker the worker was given is never restarted)"
            )
        if settings.db_url is not None:
            _secrets.hand_out_url(settings.db_url)
        if settings.db_url is not None and settings.db_url.startswith("postgresql"):
            _db.check_reachable(settings.db_url)
            if settings.db_isolation == "database":  # refused in one line, before any case
                _pgdb.check_may_create(settings.db_url)
        if settings.system.templates is not None:  # a program's own settings, fillable here
            settings.system.templates.check_campaign(
                database="postgresql"
                if (settings.db_url or "").startswith("postgresql")
                else "sqlite",
                providers=[spec.name for spec in settings.provider_specs()],
                broker=settings.broker is not None,
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
        if self.server is not None:
            self._stack.callback(self.server.remove)
        self.broker: _redis_server.RedisServer | None = None
        if settings.broker is not None:  # [broker]: a Redis of the campaign's own
            self.broker = _redis_server.create(settings.broker)
            self._stack.callback(self.broker.remove)
            _secrets.hand_out(self.broker.password)
            overrides = {**self.settings.worker_overrides, "broker_url": self.broker.url}
            self.settings = replace(self.settings, worker_overrides=overrides)
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
        #: why no further case can run: the database server went away and stayed away
        self.db_gone: str | None = None
        #: how a program's incarnations start, warm or cold and why (None: not a program)
        self.warmth: Warmth | None = None

    def __enter__(self) -> Campaign:
        # what runs killed before they could clean up left behind (work dirs, case schemas
        # and case databases)
        _scratch.sweep_stale()
        if self.settings.db_url is not None and self.settings.db_url.startswith("postgresql"):
            _db.sweep_stale_schemas(self.settings.db_url)
            _pgdb.sweep_stale(self.settings.db_url)
        try:
            # the template database its cases were copied from goes with the campaign
            self._stack.callback(_db.drop_templates, self.workdir)
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
            self._warm_up()
            for provider in self.providers.values():
                _provider_watch.watch(provider, self.supervisor)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe_start(self, result: CampaignResult) -> None:
        """Put how the program's incarnations started in ``result`` (its report's ``start``)."""
        if self.warmth is not None:
            result.extra["start"] = self.warmth.to_json()

    def _warm_up(self) -> None:
        """A program's libraries imported here, once, before any worker is forked (and
        before a parallel run forks its jobs, which inherit them): ``warmth`` says how its
        incarnations start, for the report and the console."""
        warm_up = self.settings.system.warm_up
        if warm_up is not None and self.warmth is None:
            self.warmth = warm_up()

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
            if self.db_gone is not None:
                return not_run(self.settings, case, self.db_gone)
            if self.broker is not None:  # every case starts on an empty broker
                self.broker.flush()
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
                lost = self._database_lost(exc)
                if lost is not None:  # the server's failure, never the worker's
                    return not_run(self.settings, case, lost, ran=True)
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

    def _database_lost(self, exc: Exception) -> str | None:
        """Why the case is given up when ``exc`` says the database server went away under
        the harness (None: it did not); the campaign's next cases are not run if it has not
        come back within ``_outage.BACK_WITHIN_S``."""
        url = self.settings.db_url
        down = _outage.unreachable(exc) if (url or "").startswith("postgresql") else None
        if url is None or down is None:
            return None
        assert self.supervisor is not None
        self.supervisor.kill_live()
        took = _outage.wait_back(url)
        if took is None:
            self.db_gone = (
                f"the database server went away ({down}) and did not take connections again"
                f" within {_outage.BACK_WITHIN_S:g}s"
            )
            return self.db_gone
        return (
            f"the database server went away during the case ({down}); it took connections"
            f" again {took:.1f}s after the harness found it gone, but a case it went away"
            " in the middle of cannot be judged"
        )

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
    refuse_own_work(settings.system, case)
    boundaries = with_discovered(settings.system, case)
    found = tuple(
        (point, hit)
        for point in boundaries
        for hit in sorted(set(case.callers.get(point, {}).values()))
        if hit > 1
    )
    return replace(settings.system, boundaries=boundaries, caller_hits=found), case


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
        campaign.describe_start(result)
        result.cases.extend(run_cases(campaign, cases, jobs=settings.jobs, on_case=on_case))
    return finish_campaign(result, campaign)


#: the faults that restart the campaign's database server (it must be the harness's own)
SERVER_FAULTS = ("db_restart",)


def restarts_server(settings: CampaignSettings) -> bool:
    """Whether a case of the campaign restarts its database server."""
    return settings.on_own_server and settings.db_server is None


def own_server(settings: CampaignSettings) -> _pg_cluster.Cluster:
    """A throwaway PostgreSQL server for a campaign whose cases restart it: never the
    server given with ``--db``, which others share; refused, in one line, on SQLite or a
    machine without PostgreSQL's server binaries."""
    if (settings.db_url or "").startswith("sqlite"):
        raise BadInputError(
            f"{', '.join(SERVER_FAULTS)} restarts a database server and SQLite has none: run"
            " it without --db (the harness makes a throwaway PostgreSQL server for it)"
        )
    why = _pg_cluster.unavailable()
    if why is not None:
        raise BadInputError(f"{', '.join(SERVER_FAULTS)} needs a PostgreSQL server: {why}")
    return _pg_cluster.create()


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
    """One case, start to verdict, stage by stage: prepare, run, observe (its dir, database
    and clock given back however they end), then judge and record.

    ``providers``: every provider of the campaign by name, ``provider`` first (None: that
    one alone); each gets its own epoch, faults, drain and audit."""
    opened = prepare.open_case(settings, case, workdir)
    said: list[str] = []  # the database server went away and came back on the way
    try:
        prepared = prepare.prepare_case(
            settings,
            case,
            workload,
            opened,
            provider=provider,
            supervisor=supervisor,
            secret=secret,
            workdir=workdir,
            provider_advances=provider_advances,
            credentials=credentials,
            providers=providers,
            faults_by_provider=faults_by_provider,
        )
        ended = run.run_steps(prepared, case)
        observation, events = _outage.again_when_back(
            settings.db_url,
            "read the case's ledger",
            lambda: observe.observe_case(settings, prepared),
            said,
        )
    finally:
        opened.close(said)
    judgement = judge.judge_case(
        prepared.ctx,
        case,
        observation,
        events,
        epoch=prepared.epoch,
        lost=ended.lost,
        left_behind=bool(ended.leftovers),
    )
    result = record.record_case(
        settings, case, prepared, observation, events, judgement, ended.leftovers
    )
    result.notes.extend(said)
    return result


def refuse_own_work(system: System, dry: CaseResult) -> None:
    """A worker that keeps its own work (reads its own orders, not the harness's runs) and
    declares no intent touches none of the runs it is judged on: every case would fail
    ``no_silent_loss`` for the harness's runs with a wrong fix. Said once, after the dry run
    and before any case: how to declare what it intends instead."""
    if system.intent is not None or dry.on_intended != 0 or not dry.foreign_runs:
        return
    shown = ", ".join(repr(r) for r in dry.foreign_runs)
    raise BadInputError(
        f"system {system.name!r} keeps its own work: its dry run touched none of the"
        f" {dry.intended} intended deliveries and sent under runs the harness never seeded"
        f" ({shown}); declare its intent: a `prepare` that returns its (run_id, destination)"
        ' pairs (a scenario: prepare = "module:function" in [scenario]), or'
        ' `intent="SELECT ... AS run_id, ... AS destination FROM ..."` on its System'
        " (docs/own-worker.md, Intent from your own data)"
    )
