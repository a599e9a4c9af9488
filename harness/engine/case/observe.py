"""The third stage of a case: what it left, read once its workers are done. The ledger
through the system's own ``read_ledger``, every provider's effects of the case's epoch, the
trace, and the promises the checkers judge by.

Evidence that could not be read is ``None`` here (a checker then answers unknown), never an
empty list that would pass on half the evidence.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.exc import SQLAlchemyError

from fake_providers import ProviderProcess
from harness.engine.case.prepare import Prepared
from harness.engine.plan import _glue
from harness.engine.plan._providers import ProviderSpec, comparison_surface
from harness.engine.process.supervisor import WorkerOutcome
from harness.engine.results import CampaignSettings
from harness.engine.store import _db, _outage
from harness.engine.store import trace as trace_store
from harness.engine.store.trace import TraceEvent
from harness.errors import GlueError, HarnessError
from harness.invariants import EffectRow, Observation, Policy
from harness.invariants._attribution import attribute
from harness.invariants._model import ProviderPolicy
from harness.presets import PresetFacts, facts_for
from harness.systems import System


def observe_case(
    settings: CampaignSettings, prepared: Prepared
) -> tuple[Observation, list[TraceEvent]]:
    """What the case left, read once its workers are done: the ledger, each provider's
    effects of the case's own epoch, the trace, and the promises the checkers judge by."""
    ctx, named, epochs = prepared.ctx, prepared.named, prepared.epochs
    events = trace_store.read(ctx.trace_path)
    # in the order they were started, not the order they happened to end (racers): two
    # runs of one seed report the same workers in the same order
    ctx.outcomes.sort(key=lambda o: _spawn_index(o.worker))
    observation = _observe(
        settings.system,
        ctx.target,
        ctx.intended,
        {name: (each, epochs[name]) for name, each in named.items()},
        ctx.outcomes,
        _policy(settings, prepared),
        events,
    )
    observation = replace(
        observation,
        observed_at=ctx.clock.now(),
        provider_clock_offset_s=sum(s for _, s in ctx.provider_advances),
    )
    if observation.ledger is not None and observation.ledger.refused is not None:
        ctx.notes.append(observation.ledger.refused)  # why the ledger was not judged
    return observation, events


def _policy(settings: CampaignSettings, prepared: Prepared) -> Policy:
    """The promises the case is judged by: the workers' settings, the credentials the
    harness granted and each provider's own keys, lookup and window."""
    base_config, named = prepared.ctx.base_config, prepared.named
    provider = prepared.ctx.provider
    return Policy(
        key_window_s=base_config.key_window_s,
        retry_backoff_s=base_config.retry_backoff_s,
        max_attempts=base_config.max_attempts,
        lease_s=base_config.lease_s,
        request_timeout_s=base_config.request_timeout_s,
        liveness_grace_s=base_config.liveness_grace_s,
        # what the harness granted the provider, not what the worker says it used
        credential_scopes={c.credential_id: c.scope for c in prepared.grants},
        provider_lookup=preset_facts(settings).lookup,
        provider_keys=preset_facts(settings).keyed,
        provider_window_s=provider_window_s(provider, settings),
        surface=comparison_surface(list(prepared.presets.values())),
        providers=tuple(named) if len(named) > 1 else (),
        per_provider=_per_provider(settings, named) if len(named) > 1 else {},
    )


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
    except HarnessError:
        raise
    except Exception as exc:
        if target.kind == "postgresql" and _outage.unreachable(exc) is not None:
            raise  # the server went away: read again once it is back (_outage)
        if isinstance(exc, SQLAlchemyError):  # the worker's database as it left it: the
            ledger = None  # checkers say unknown
        else:  # a bug in the user's adapter is theirs, not the worker's
            raise GlueError(
                _glue.describe(f"system {system.name!r}: its read_ledger", exc)
            ) from exc
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


def _spawn_index(worker: str) -> tuple[int, str]:
    """``w3`` -> 3: the harness names a case's workers in the order it starts them."""
    digits = worker[1:]
    return (int(digits), worker) if worker[:1] == "w" and digits.isdigit() else (1 << 30, worker)
