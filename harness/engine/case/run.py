"""The second stage of a case: its fault steps run, fresh workers finish the work, every
provider is drained of the case's epoch and audited, and what outlived the workers is found
and stopped.

A provider lost on the way (dead, stopped, hung) is said as the case's loss here, so the
later stages leave the case undecided instead of blaming the worker for it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from fake_providers import ProviderProcess
from harness.engine.case import _provider_watch
from harness.engine.case._context import CaseContext
from harness.engine.case._provider_reasons import reason_notes
from harness.engine.case.prepare import Prepared
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process import _leftovers
from harness.engine.process._lifeline import LifelineCut
from harness.engine.results import Landing, StepRecord
from harness.engine.store import _secrets
from harness.faults import FAULTS

#: how long a case waits, once its workers are done, for the provider to answer or drop every
#: request of the case's epoch (a held reply) before it is observed
DRAIN_TIMEOUT_S = 10.0


#: the longest one server-side drain wait lasts before the providers' heartbeats are looked
#: at again (a stopped provider answers no drain: its read time-out is this plus a margin)
DRAIN_SLICE_S = 2.0


#: how long a failed call to the provider waits to see its process end
DEATH_GRACE_S = _provider_watch.DEATH_GRACE_S


@dataclass
class Ended:
    """How the run of a case ended: the provider lost on the way (None: none), and every
    process of the case that outlived its worker or the case, stopped."""

    lost: str | None
    leftovers: list[_leftovers.Leftover]


def run_steps(prepared: Prepared, case: CaseSpec) -> Ended:
    """Every planned step and the finishing workers, each provider drained and audited, then
    what outlived the workers stopped. A provider that died, stopped or hung on the way is
    the case's loss (``Ended.lost``), never a worker's failure."""
    ctx, named, epochs = prepared.ctx, prepared.named, prepared.epochs
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
    if found is not None:
        _provider_watch.abandon(ctx, case, found[0], found[1])
    leftovers = _case_leftovers(ctx, named)
    # every process of the case is gone: no secret it handed a worker stays in the trace
    # (a discovered send's target is its URL's path, a Slack webhook's secret in it)
    with contextlib.suppress(OSError):
        _secrets.scrub_file(ctx.trace_path)
    ctx.tear_down()
    return Ended(lost=None if found is None else found[0], leftovers=leftovers)


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


class ProviderStalled(Exception):
    """A provider stopped answering while the harness talked to it (``_stalled``)."""


def _stalled(providers: list[ProviderProcess]) -> None:
    """``ProviderStalled`` if any of ``providers`` is stopped or hung (its heartbeat)."""
    for provider in providers:
        how = _provider_watch.stall(provider)
        if how is not None:
            raise ProviderStalled(how)


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
