"""Settling a real system: wait, by its own account, until nothing is pending, up to a deadline.

The reference worker finishes its work and exits, so "the worker ended" means "settled".
Third-party systems do not: a task queue's recovery runs on wall-clock timers (visibility
timeouts, heartbeats, stalled-job sweeps) that the harness cannot compress. A scenario can
therefore name

- a **probe**: a command (exit status 0 = nothing pending; its output is kept as evidence) or
  a ``module:function`` called with the ``WorkerConfig`` that returns True when settled;
- a **recovery hook**, run before each fresh worker the harness starts to finish the work
  (e.g. the system's own stalled-job sweep), a command or ``module:function`` likewise;
- a **deadline** in wall seconds, and the probe's **interval**.

- a **teardown**, run once the case is over, however it ended, to clear what the case left
  in a broker the harness does not own (its queue, its registries), a command or
  ``module:function`` likewise.

A probe's answer is evidence: a command's output is kept, and a function may return True or
None (settled), False (pending), a ``(settled, evidence)`` pair, or a mapping of counts
(settled when every count is 0, e.g. ``{"queued": 0, "unacked": 1}``).

For a daemon worker (``[worker] daemon``) the probe is asked while the worker runs: the system
has settled when the probe says nothing is pending *and* either the provider has accepted every
intended delivery or nothing (no boundary hit, no provider request) has happened for
``quiet_s``. A daemon without a probe settles on the second half alone. The quiet window and
the deadline count from the worker's first sign of life, and a deadline is decided on
readings taken after it (``harness.engine.process._daemon_watch``).

A delivery still pending at the deadline is a liveness failure with its age (the trace gets a
``settle_deadline`` line that the ``liveness`` checker reads), never dropped from the count,
unless the machine starved the worker (``harness.engine.process._cpu_wait``): then it is undecided.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.engine.store._secrets import without_provider_secrets
from harness.errors import BadInputError
from harness.worker_config import WorkerConfig

#: the most of a probe's or hook's output kept as evidence
OUTPUT_CHARS = 2000


@dataclass(frozen=True)
class Settle:
    """How to tell that a system has settled, how to help it, and how long to wait."""

    #: None only for a daemon worker, which can settle on the provider's log or quiet alone
    probe: str | None
    recovery: str | None = None
    deadline_s: float = 30.0
    interval_s: float = 0.5
    #: wall seconds a probe or hook command may take
    command_timeout_s: float = 30.0
    teardown: str | None = None
    #: a daemon whose probe says "nothing pending" has settled after this long with nothing
    #: happening, even if the provider has not accepted every intended delivery (one was lost)
    quiet_s: float = 2.0

    def __post_init__(self) -> None:
        if self.deadline_s <= 0 or self.interval_s <= 0 or self.quiet_s < 0:
            raise BadInputError("settle: deadline_s and interval_s must be > 0, quiet_s >= 0")
        for what, ref in (
            ("probe", self.probe),
            ("recovery", self.recovery),
            ("teardown", self.teardown),
        ):
            if ref is not None and not ref.strip():
                raise BadInputError(f"settle: {what} is empty; give a command or module:function")

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "recovery": self.recovery,
            "teardown": self.teardown,
            "deadline_s": self.deadline_s,
            "interval_s": self.interval_s,
            "quiet_s": self.quiet_s,
        }

    def settled(self, config: WorkerConfig) -> tuple[bool, str]:
        """Ask the probe; (True, output) when the system says nothing is pending."""
        if self.probe is None:
            return True, "no probe"
        return _call(self.probe, config, self.command_timeout_s, what="probe")

    def recover(self, config: WorkerConfig) -> tuple[bool, str]:
        """Run the recovery hook (if any); (ran cleanly, output)."""
        if self.recovery is None:
            return True, ""
        return _call(self.recovery, config, self.command_timeout_s, what="recovery hook")

    def tear_down(self, config: WorkerConfig) -> tuple[bool, str]:
        """Run the teardown hook (if any); (ran cleanly, output)."""
        if self.teardown is None:
            return True, ""
        return _call(self.teardown, config, self.command_timeout_s, what="teardown")


def _callable(ref: str) -> Callable[[WorkerConfig], Any] | None:
    """``module:function`` as a callable, or None when ``ref`` is a command line."""
    if " " in ref.strip() or ref.count(":") != 1:
        return None
    module_name = ref.partition(":")[0]
    if not module_name.replace(".", "").replace("_", "").isalnum():
        return None
    from harness.systems import import_attr

    found = import_attr(ref, where=f"settle: {ref!r}", error=BadInputError)
    if not callable(found):
        raise BadInputError(f"settle: {ref!r} is not a function")
    return found


def _call(ref: str, config: WorkerConfig, timeout_s: float, *, what: str) -> tuple[bool, str]:
    fn = _callable(ref)
    if fn is not None:
        result = fn(config)
        if what != "probe":  # a hook's return value is evidence, never a verdict
            return result is not False, "" if result in (None, True, False) else str(result)
        return _answer(ref, result, what=what)
    env = {**without_provider_secrets(os.environ), **config.to_env()}
    argv = shlex.split(ref)
    if argv and argv[0] == "python":  # the harness's own interpreter, as for cmd: systems
        argv[0] = sys.executable
    try:
        done = subprocess.run(  # the user's own command, from their scenario
            argv,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError as exc:
        raise BadInputError(f"settle: {what} {ref!r} cannot run: {exc}") from None
    except subprocess.TimeoutExpired:
        return False, f"{what} {ref!r} took longer than {timeout_s}s"
    output = (done.stdout + done.stderr)[-OUTPUT_CHARS:]
    return done.returncode == 0, output


def _answer(ref: str, result: object, *, what: str) -> tuple[bool, str]:
    """A function's answer as (settled, evidence); anything else is the scenario's mistake,
    never read as "settled" (that would pass a case nobody judged)."""
    if result is None or isinstance(result, bool):
        return result is not False, ""
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], bool)
        and isinstance(result[1], str)
    ):
        return result[0], result[1][:OUTPUT_CHARS]
    if isinstance(result, Mapping) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in result.values()
    ):
        evidence = " ".join(f"{k}={v}" for k, v in result.items())
        return not any(result.values()), evidence[:OUTPUT_CHARS]
    raise BadInputError(
        f"settle: {what} {ref!r} returned {result!r}; expected True/None (settled), False "
        "(pending), a (bool, evidence) pair or a mapping of pending counts"
    )
