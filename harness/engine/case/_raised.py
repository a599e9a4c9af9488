"""Say in one line why a worker died by raising: which exception, where in *its* code, and
which provider fault it did not survive.

A naive worker that lets ``requests.post`` raise on a dropped reply is the commonest first
result a user sees; sixty lines of urllib3 frames bury the one fact that matters ("your
worker raised ConnectionError at crash.py:18 after the provider dropped a reply"). The full
traceback stays in the report (``stderr_tail``) and in the worker's stderr file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)?)(: (?P<msg>.*))?$"
)
#: frames under the harness package are not the worker's own (the package, not this module's
#: folder: the module may live in a sub-package)
_HARNESS = str(Path(harness.__file__).resolve().parent)
#: what each provider fault looks like from the worker's side
_FAULTS = {
    "accept_then_drop": "a dropped reply",
    "timeout": "a reply that never came (a timeout)",
    "slow": "a slow reply",
}


@dataclass(frozen=True)
class Raised:
    """The last exception of a Python traceback and the innermost frame of the worker's code."""

    exception: str
    message: str
    where: str | None


def _is_library(path: str) -> bool:
    libraries = ("site-packages", "dist-packages", "/lib/python3")
    return path.startswith((_HARNESS, "<")) or any(part in path for part in libraries)


def parse(stderr: str) -> Raised | None:
    """The exception a traceback in ``stderr`` ended with, or None if there is none."""
    lines = stderr.rstrip().splitlines()
    start = max(
        (i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent")), default=None
    )
    if start is None:  # a tail cut inside a long traceback (a framework's frames): its frames
        start = next((i - 1 for i, ln in enumerate(lines) if _FRAME.match(ln)), None)
    if start is None:
        return None
    where: str | None = None
    last: Raised | None = None
    for ln in lines[start + 1 :]:
        frame = _FRAME.match(ln)
        if frame:
            if not _is_library(frame["file"]):
                where = f"{frame['file']}:{frame['line']} in {frame['func']}"
            continue
        if ln.startswith((" ", "\t")):
            continue
        found = _EXCEPTION.match(ln)
        if found:
            last = Raised(found["type"], (found["msg"] or "").strip(), where)
    return last


def fault_seen(effects: Sequence[Any] | None) -> str | None:
    """What the last fault the provider applied in this case looked like to a worker."""
    faulted = [e for e in effects or () if getattr(e, "fault", None)]
    if not faulted:
        return None
    last = max(faulted, key=lambda e: getattr(e, "seq", 0))
    kind = str(last.fault)
    if kind == "status":
        what = f"a {last.status_code} reply" if last.status_code else "an error status"
    else:
        what = _FAULTS.get(kind, f"the fault {kind!r}")
    return f"{what} to {last.destination}" if getattr(last, "destination", None) else what


def explain(worker: str, stderr: str, effects: Sequence[Any] | None) -> str | None:
    """One line for a worker that died by raising, or None if its stderr shows no raise."""
    raised = parse(stderr)
    if raised is None:
        return None
    message = raised.message if len(raised.message) <= 120 else raised.message[:117] + "..."
    line = f"worker {worker} raised {raised.exception}"
    line += f" at {raised.where}" if raised.where else ""
    line += f": {message}" if message else ""
    fault = fault_seen(effects)
    if fault is not None:
        line += f"; it did not survive {fault} (a fault the provider injected)"
    return line
