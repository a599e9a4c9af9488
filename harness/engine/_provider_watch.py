"""A campaign's provider, watched like its workers: noticed when it dies, restarted on its log.

Killed from outside (the OOM killer, a user, a hostile worker), a provider leaves its case's
workers retrying into a closed port, and a harness that waits on them waits for a deadline.
So the supervisor watches the provider's pidfd in every wait (``harness.engine._lifeline``); when
it ends, the case in flight is abandoned: its workers are killed, what was left to do is
not run, and the case is *unknown* (a provider that vanished says nothing about the system
under test), with a note naming the provider and how it ended.

The provider is then restarted on the same log. The log is the ground truth the finished
cases were judged on, and the case in flight still has its own epoch in it: the restarted
provider keeps every record and every epoch number, and the next case opens a fresh epoch
as usual. If it cannot be restarted then, nor before the next case, every later case is
reported *unknown*, not run (exit 3), and the report says why.
"""

from __future__ import annotations

import os
import signal
import weakref

from fake_providers import ProviderProcess
from fake_providers._errors import ProviderStartError
from harness.engine._case import CaseContext
from harness.engine._faketime import forget as forget_faketime
from harness.engine.schedule import CaseSpec
from harness.engine.supervisor import DUMP_GRACE_S, OutcomeKind, Supervisor, wait_readable

#: how long a failed call to the provider waits for its process to be seen ending: a killed
#: process closes its sockets a moment before its pidfd turns ready
DEATH_GRACE_S = 2.0


#: the name each campaign gave its providers (``[provider.NAME]``); a provider started
#: elsewhere is named after its preset
_NAMES: weakref.WeakKeyDictionary[ProviderProcess, str] = weakref.WeakKeyDictionary()


def name(provider: ProviderProcess, called: str) -> None:
    """Call ``provider`` ``called`` in every note and lifeline about it."""
    _NAMES[provider] = called


def name_of(provider: ProviderProcess) -> str:
    return f"provider {_NAMES.get(provider, provider.preset)}"


def watch(provider: ProviderProcess, supervisor: Supervisor) -> None:
    """Make the provider a lifeline of every wait the supervisor makes."""
    supervisor.lifelines.watch(name_of(provider), provider.pid)


def death(provider: ProviderProcess, *, grace_s: float = 0.0) -> str | None:
    """``"provider payments (pid 12) was killed by SIGKILL"`` if the provider's process has
    ended (or ends within ``grace_s``), else None."""
    if provider.running and grace_s > 0:
        try:
            fd = os.pidfd_open(provider.pid)  # not reaped yet (``running`` said so): ours
        except OSError:
            fd = None
        if fd is not None:
            try:
                wait_readable([fd], grace_s)
            finally:
                os.close(fd)
    code = provider.returncode
    if code is None:
        return None
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with status {code}"
    return f"{name_of(provider)} (pid {provider.pid}) {how}"


def revive(provider: ProviderProcess, supervisor: Supervisor) -> str | None:
    """Restart the provider on its log and watch it again; the reason if it cannot be."""
    supervisor.lifelines.forget(provider.pid)  # the dead one's pidfd would fire in a wait
    try:
        provider.restart()
    except (ProviderStartError, OSError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    watch(provider, supervisor)
    return None


def first_death(providers: list[ProviderProcess], *, grace_s: float = 0.0) -> str | None:
    """How the first of ``providers`` found dead ended, or None when all run."""
    for provider in providers:
        lost = death(provider, grace_s=grace_s if provider.running else 0.0)
        if lost is not None:
            return lost
    return None


def abandon(
    ctx: CaseContext, case: CaseSpec, lost: str, dead: ProviderProcess | None = None
) -> None:
    """The provider ended while ``case`` ran: record it, kill every worker still running
    (recorded as stopped by the harness, not as a death of their own), mark the steps not
    yet done as not run, and restart the provider for the next case. With several
    providers, ``dead`` is the one that ended (every other one found dead too is restarted)."""
    supervisor = ctx.supervisor
    provider = dead if dead is not None else ctx.provider
    supervisor.lifelines.forget(provider.pid)  # seen by a failed call: the pidfd says it too
    ctx.record("provider_lost", provider=name_of(provider), provider_pid=provider.pid, how=lost)
    for worker in supervisor.live_workers:
        supervisor.kill(worker, trace_path=ctx.trace_path, reason="provider lost")
        outcome = supervisor.wait(worker, timeout_s=DUMP_GRACE_S, trace_path=ctx.trace_path)
        outcome.kind = OutcomeKind.STOPPED
        outcome.note = f"killed by the harness: {lost} while it ran"
        if ctx.base_config.fake_time_file is not None:
            forget_faketime(outcome.pid)
        ctx.outcomes.append(outcome)
    for step in case.steps[len(ctx.steps) :]:
        ctx.skip_step(step, f"not run: {lost} during the case")
    failed = revive(provider, supervisor)
    for other in ctx.providers.values():
        if other is not provider and not other.running:
            supervisor.lifelines.forget(other.pid)
            failed = failed or revive(other, supervisor)
    after = (
        f"restarted on its log (pid {provider.pid}) for the next case"
        if failed is None
        else f"it could not be restarted ({failed}); the next case tries once more"
    )
    ctx.record("provider_restart", ok=failed is None, provider_pid=provider.pid, error=failed)
    ctx.notes.append(
        f"{lost} during the case: the case cannot be judged (its workers were killed and "
        f"its work left unfinished); {after}"
    )
