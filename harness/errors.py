"""Every error crash-harness raises on purpose, in one tree.

    HarnessError                 base; never raised itself
    ├── BadInputError            the user's input is wrong (exit 2): names the field and the fix
    │   ├── UnknownBoundaryError a plan names a boundary the system does not declare
    │   ├── UnknownSystemError   --system names nothing we can load
    │   ├── SystemDefinitionError a simple_system or ledger adapter is declared wrongly
    │   ├── GlueError            the user's own code the harness calls (prepare, intent, a
    │   │                        ledger adapter, the module defining a system) raised
    │   └── DatabaseUnreachableError  --db cannot be connected to
    ├── LeaseLostError           a worker's fenced update found a newer lease epoch
    └── SupervisorError          the harness could not start or reap a worker

Exit statuses are fixed so CI can tell outcomes apart (see ``ExitStatus``).
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """What ``crash-harness`` exits with."""

    PASSED = 0
    VIOLATION = 1
    BAD_INPUT = 2
    INCONCLUSIVE = 3
    INTERNAL_ERROR = 4


class HarnessError(Exception):
    """Base of every deliberate crash-harness error."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stopped like Ctrl-C (workers and providers killed, partial report
    written), but exiting ``TERMINATED_STATUS`` with a line that says SIGTERM."""


#: what a command exits with after Ctrl-C, and after SIGTERM (128 + the signal's number)
INTERRUPTED_STATUS = 130
TERMINATED_STATUS = 143


def interruption(exc: KeyboardInterrupt) -> tuple[str, int]:
    """How to say an interruption happened, and the status to exit with."""
    if isinstance(exc, Terminated):
        return "terminated by SIGTERM", TERMINATED_STATUS
    return "interrupted", INTERRUPTED_STATUS


class BadInputError(HarnessError):
    """The input (a flag, a scenario, a URL) is wrong; the message says which and why."""


class UnknownBoundaryError(BadInputError):
    """A crash plan names a boundary the system under test does not declare."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(
            f"unknown boundary {name!r}; the system declares: {', '.join(sorted(known))}"
        )
        self.name = name
        self.known = known


class UnknownSystemError(BadInputError):
    """``--system`` names no built-in system, mutant or importable ``module:attr``."""


class SystemDefinitionError(BadInputError, ValueError):
    """A user's ``simple_system(...)`` or ``LedgerAdapter`` is declared wrongly (a boundary
    listed twice, a state mapped to no harness state): refused where it is written, before a
    case runs. A ``ValueError`` too, as these were before they had a name."""


class GlueError(BadInputError):
    """The user's own code that the harness calls in its own process (a system's
    ``prepare``, its ``intent``, its ledger adapter, the module that defines it) raised. A
    setup error (exit 2), said in one line naming the user's file and line and the exception:
    never a finding about the worker (exit 1), never the harness's own failure (exit 4)."""


class DatabaseUnreachableError(BadInputError):
    """The database URL given cannot be connected to."""


class LeaseLostError(HarnessError):
    """A fenced ledger update lost to a newer lease epoch; the worker must drop the item."""


class SupervisorError(HarnessError):
    """The supervisor could not start, watch or reap a worker process."""
