"""A campaign's provider, watched like its workers: noticed when it dies, restarted on its log.

Killed from outside (the OOM killer, a user, a hostile worker), a provider leaves its case's
workers retrying into a closed port, and a harness that waits on them waits for a deadline.
So the supervisor watches the provider's pidfd in every wait
(``harness.engine.process._lifeline``); when
it ends, the case in flight is abandoned: its workers are killed, what was left to do is
not run, and the case is *unknown* (a provider that vanished says nothing about the system
under test), with a note naming the provider and how it ended.

A provider can also stop answering without ending: SIGSTOPped (by a worker, a user), frozen
by a debugger, its serving loop stuck. Its sockets stay open, so its clients see only read
time-outs, and a harness that waited for those would sit through a minute of them. So every
provider beats on a pipe only the harness reads (``fake_providers._heartbeat``), and the
same waits look at it between slices (``stall``): a provider whose process is stopped and
silent for ``STOPPED_AFTER_S``, or silent for ``HUNG_AFTER_S`` however it looks, is lost as a
dead one is, named with what was seen (``provider payments (pid 12) stopped (SIGSTOP), silent for
1.2 s``: since its last heartbeat), and killed before it is restarted. A reply the harness
itself holds (``provider_hold``/``slow`` faults, far-side holds) holds one request, never
the serving loop, so it is never taken for a stall.

The provider is then restarted on the same log. The log is the ground truth the finished
cases were judged on, and the case in flight still has its own epoch in it: the restarted
provider keeps every record and every epoch number, and the next case opens a fresh epoch
as usual. If it cannot be restarted then, nor before the next case, every later case is
reported *unknown*, not run (exit 3), and the report says why.
"""

from __future__ import annotations

import os
import signal
import time
import weakref
from pathlib import Path

from fake_providers import ProviderProcess
from fake_providers._errors import ProviderStartError
from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import CaseSpec
from harness.engine.process.supervisor import DUMP_GRACE_S, OutcomeKind, Supervisor, wait_readable

#: how long a failed call to the provider waits for its process to be seen ending: a killed
#: process closes its sockets a moment before its pidfd turns ready
DEATH_GRACE_S = 2.0
#: how long a provider whose process is stopped (``T``, ``t`` in ``/proc/<pid>/stat``) must
#: also have been silent before it is lost: a debugger's glance (``py-spy dump``) is shorter
STOPPED_AFTER_S = 1.0
#: how long a provider that is not stopped may be silent (its serving loop beats every
#: 0.25 s) before it is lost as hung: long enough for a loaded machine's scheduling delays
HUNG_AFTER_S = 5.0


#: the name each campaign gave its providers (``[provider.NAME]``); a provider started
#: elsewhere is named after its preset
_NAMES: weakref.WeakKeyDictionary[ProviderProcess, str] = weakref.WeakKeyDictionary()


def name(provider: ProviderProcess, called: str) -> None:
    """Call ``provider`` ``called`` in every note and lifeline about it."""
    _NAMES[provider] = called


def name_of(provider: ProviderProcess) -> str:
    return f"provider {_NAMES.get(provider, provider.preset)}"


def watch(provider: ProviderProcess, supervisor: Supervisor) -> None:
    """Make the provider a lifeline of every wait the supervisor makes: its end, and its
    heartbeat falling silent (``stall``)."""
    beat = provider.heartbeat_fd
    supervisor.lifelines.watch(
        name_of(provider),
        provider.pid,
        pulse=lambda: stall(provider),
        child_closes=() if beat is None else (beat,),
    )


def stall(provider: ProviderProcess, *, settle: bool = False) -> str | None:
    """``"provider payments (pid 12) stopped (SIGSTOP), silent for 1.2 s"`` (since its last
    heartbeat) if the provider runs but has stopped answering (see the module), else None.

    ``settle``: a provider found stopped but not yet silent for ``STOPPED_AFTER_S`` is
    given the rest of that time to beat again, here, instead of being let through to a
    call it cannot answer (before a case opens its epoch)."""
    heard = provider.heard() if provider.running else None
    if heard is None:
        return None
    silent = time.monotonic() - heard
    state = process_state(provider.pid) if settle and silent < STOPPED_AFTER_S else None
    beat = provider.heartbeat_fd
    if state in ("T", "t") and beat is not None:
        # a hair past the limit: the wait counts whole milliseconds, rounded down
        wait_readable([beat], STOPPED_AFTER_S - silent + 0.05)
        heard = provider.heard() or heard
        silent = time.monotonic() - heard
    if silent < STOPPED_AFTER_S:
        return None
    state = process_state(provider.pid)
    if state in ("T", "t"):
        how = f"stopped ({stop_cause(provider.pid, state)})"
    elif silent >= HUNG_AFTER_S:
        how = f"hung (not answering; its process is in state {state or '?'})"
    else:
        return None
    return f"{name_of(provider)} (pid {provider.pid}) {how}, silent for {silent:.1f} s"


def process_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``R``, ``S``, ``D``, ``T`` stopped, ``t``
    stopped by a tracer, ...), None if it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2 :]
    return rest[:1].decode() or None


def stop_cause(pid: int, state: str) -> str:
    """``SIGSTOP`` (or the stopping signal) for a stopped child of this process, read without
    consuming it; ``by a debugger (ptrace)`` for a tracing stop."""
    if state == "t":
        return "by a debugger (ptrace)"
    try:
        said = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, OSError):  # not this process's child: the state says enough
        said = None
    if said is not None and said.si_code == os.CLD_STOPPED:
        try:
            return signal.Signals(said.si_status).name
        except ValueError:
            return f"signal {said.si_status}"
    return "state T"


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
    """Restart the provider on its log and watch it again; the reason if it cannot be. One
    still running (stopped, hung) is SIGKILLed first: a stopped process leaves a SIGTERM
    pending, and a hung one may never act on it."""
    supervisor.lifelines.forget(provider.pid)  # the dead one's pidfd would fire in a wait
    if provider.running:
        provider.kill()
    try:
        provider.restart()
    except (ProviderStartError, OSError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    watch(provider, supervisor)
    return None


def first_loss(
    providers: list[ProviderProcess], *, grace_s: float = 0.0
) -> tuple[str, ProviderProcess] | None:
    """The first of ``providers`` found dead (waiting ``grace_s`` for one to end), else the
    first found stopped or hung, with what was seen; None when all answer."""
    for provider in providers:
        lost = death(provider, grace_s=grace_s if provider.running else 0.0)
        if lost is not None:
            return lost, provider
    for provider in providers:
        stalled = stall(provider)
        if stalled is not None:
            return stalled, provider
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
    stalled = provider.running  # stopped or hung, not dead: killed before it is restarted
    for worker in supervisor.live_workers:
        supervisor.kill(worker, trace_path=ctx.trace_path, reason="provider lost")
        outcome = supervisor.wait(worker, timeout_s=DUMP_GRACE_S, trace_path=ctx.trace_path)
        outcome.kind = OutcomeKind.STOPPED
        outcome.note = f"killed by the harness: {lost} while it ran"
        ctx.outcomes.append(outcome)
    for step in case.steps[len(ctx.steps) :]:
        ctx.skip_step(step, f"not run: {lost} during the case")
    failed = revive(provider, supervisor)
    for other in ctx.providers.values():
        if other is not provider and (not other.running or stall(other) is not None):
            supervisor.lifelines.forget(other.pid)
            failed = failed or revive(other, supervisor)
    restarted = "killed and restarted" if stalled else "restarted"
    after = (
        f"{restarted} on its log (pid {provider.pid}) for the next case"
        if failed is None
        else f"it could not be restarted ({failed}); the next case tries once more"
    )
    ctx.record("provider_restart", ok=failed is None, provider_pid=provider.pid, error=failed)
    ctx.notes.append(
        f"{lost} during the case: the case cannot be judged (its workers were killed and "
        f"its work left unfinished); {after}"
    )
