"""The first stage of a case: its own dir, database and clock, the ledger made and seeded,
a new epoch with the case's faults armed on every provider, and the workers' settings.

Everything a case starts from is made here and nowhere else, so a case can be replayed alone
from its seed and id: it shares no row, effect or clock with another case.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from fake_providers import FaultRule, ProviderProcess
from harness.clock import SharedClock, start_for_seed
from harness.engine.case._context import CaseContext
from harness.engine.plan import _glue
from harness.engine.plan import credentials as credentials_mod
from harness.engine.plan.schedule import CaseSpec
from harness.engine.plan.workload import Workload, case_intent, seed_database
from harness.engine.process import _faketime
from harness.engine.process.supervisor import Supervisor
from harness.engine.results import CampaignSettings
from harness.engine.store import _db, _outage
from harness.engine.store import trace as trace_store
from harness.faults.provider import pin_workload_rules
from harness.intake import INTAKE_ROSTER
from harness.systems import System
from harness.worker_config import ProviderEndpoint, WorkerConfig

#: a reply slower than this is an unknown outcome (kept short: timeouts are part of the tests)
HARNESS_REQUEST_TIMEOUT_S = 1.0


def worker_request_timeout_s(settings: CampaignSettings) -> float:
    """A worker's request timeout in this campaign: the harness's, unless the scenario or the
    system sets its own (as ``worker_config`` resolves it)."""
    given = {**settings.worker_overrides, **dict(settings.system.config_overrides)}
    value = given.get("request_timeout_s", HARNESS_REQUEST_TIMEOUT_S)
    return float(value) if isinstance(value, int | float) else HARNESS_REQUEST_TIMEOUT_S


#: wall seconds a due delivery may sit untouched before the watchdog calls it overdue
HARNESS_LIVENESS_GRACE_S = 0.5


@dataclass
class Opened:
    """What a case holds from its first line to its last, however it ends: its own dir,
    database, clock and (once made) context. ``close`` gives them all back."""

    case_dir: Path
    target: _db.DatabaseTarget
    clock: SharedClock
    started: float
    ctx: CaseContext | None = None

    def close(self, notes: list[str] | None = None) -> None:
        """``notes``: where to say that the database server went away as the case's
        database was dropped, and that it was dropped once the server was back."""
        if self.ctx is not None:
            self.ctx.tear_down()  # once, however the case ended: the broker's state is the case's
        self.clock.close()
        _outage.again_when_back(
            self.target.server_url or self.target.url,
            "dropped the case's database",
            lambda: _db.drop_target(self.target),
            [] if notes is None else notes,
        )


@dataclass
class Prepared:
    """A case ready to run: its context, and what the later stages read of how it was set up
    (every provider by name with the epoch opened for it, the credentials granted)."""

    ctx: CaseContext
    named: dict[str, ProviderProcess]
    epochs: dict[str, int]
    grants: tuple[credentials_mod.Credential, ...]
    #: provider name -> the preset it speaks, in the campaign's order
    presets: dict[str, str]

    @property
    def epoch(self) -> int:
        """The first provider's epoch: the one the case is judged on by number."""
        return self.epochs[next(iter(self.epochs))]


def open_case(settings: CampaignSettings, case: CaseSpec, workdir: Path) -> Opened:
    """A fresh dir, database target and clock for ``case``: nothing of an earlier run of it."""
    started = time.time()
    case_dir = workdir / case.slug
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    target = _db.new_target(
        settings.db_url,
        workdir=case_dir,
        case_slug=case.slug,
        stem=settings.sqlite_stem,
        isolation=settings.db_isolation,
    )
    clock = SharedClock.create(
        str(case_dir / trace_store.CLOCK_FILE), start=start_for_seed(settings.seed)
    )
    return Opened(case_dir=case_dir, target=target, clock=clock, started=started)


def prepare_case(
    settings: CampaignSettings,
    case: CaseSpec,
    workload: Workload,
    opened: Opened,
    *,
    provider: ProviderProcess,
    supervisor: Supervisor,
    secret: str,
    workdir: Path,
    provider_advances: list[tuple[float, float]] | None = None,
    credentials: tuple[credentials_mod.Credential, ...] | None = None,
    providers: dict[str, ProviderProcess] | None = None,
    faults_by_provider: dict[str, tuple[dict[str, Any], ...]] | None = None,
) -> Prepared:
    """The ledger made and seeded, the intent read, a new epoch with this case's faults armed
    on every provider, the workers' settings, and the case's context (set on ``opened`` as
    soon as it exists, so it is torn down however the rest goes)."""
    specs = {spec.name: spec for spec in settings.provider_specs()}
    first_name = next(iter(specs))
    named = dict(providers) if providers else {first_name: provider}
    system = settings.system
    target, clock = opened.target, opened.clock
    # A SQLite ledger (a case's own PostgreSQL database) is copied from a template made by
    # the campaign's first case.
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
    presets = {
        name: specs[name].preset if name in specs else each.preset for name, each in named.items()
    }
    base_config = _base_config(settings, case, opened, provider, named, epochs, presets, grants)
    ctx = opened.ctx = CaseContext(
        system=system,
        workload=workload,
        target=target,
        provider=provider,
        supervisor=supervisor,
        secret=secret,
        case_dir=opened.case_dir,
        clock=clock,
        worker_deadline_s=settings.worker_deadline_s,
        base_config=base_config,
        provider_rules=rules,
        intended=intended,
        provider_advances=provider_advances if provider_advances is not None else [],
        crash_scope=settings.crash_scope,
        settle=settings.settle,
        lifecycle=settings.lifecycle,
        next_system=settings.next_system,
        prepare_next=settings.prepare_next,
        started_at=opened.started,
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
        for name, each_epoch in epochs.items():
            ctx.record("provider_epoch", epoch=each_epoch, provider=name)
    return Prepared(ctx=ctx, named=named, epochs=epochs, grants=grants, presets=presets)


def _base_config(
    settings: CampaignSettings,
    case: CaseSpec,
    opened: Opened,
    provider: ProviderProcess,
    named: dict[str, ProviderProcess],
    epochs: dict[str, int],
    presets: dict[str, str],
    grants: tuple[credentials_mod.Credential, ...],
) -> WorkerConfig:
    """Every worker's settings in this case: its database, clock and fake time, each
    provider at its epoch's URL with the first credential, and the harness's short timeouts
    under what the scenario and the system set."""
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
        **dict(settings.system.config_overrides),
    }
    endpoints = {
        name: ProviderEndpoint(
            name=name,
            preset=presets[name],
            url=epoch_url(each.url, epochs[name]),
            smtp_port=each.smtp_port,
            credential_id=grants[0].credential_id,
            credential=grants[0].secret,
        )
        for name, each in named.items()
    }
    fake_time_file = None
    if settings.lifecycle.fake_time:
        _faketime.preload()  # built here: never inside a worker
        fake_time_file = opened.case_dir / _faketime.OFFSET_FILE
        _faketime.write_offset(fake_time_file, 0.0)
    return WorkerConfig(
        db=opened.target,
        provider_url=epoch_url(provider.url, epochs[next(iter(epochs))]),
        credential_id=grants[0].credential_id,
        credential_secret=grants[0].secret,
        destination_scope=grants[0].scope_text,
        credentials=grants if settings.credentials != "shared" else (),
        worker_name="w0",
        clock_path=opened.clock.path,
        fake_time_file=None if fake_time_file is None else str(fake_time_file),
        providers=endpoints,
        case_id=case.id,
        **overrides,
    )


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


def epoch_url(url: str, epoch: int) -> str:
    """The provider base URL a case's workers get: its epoch as a path prefix, which the fake
    provider strips and checks (``docs/own-worker.md``)."""
    return f"{url.rstrip('/')}/epoch/{epoch}"


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
