"""A hostile worker that freezes its judge: it SIGSTOPs the fake provider mid-case.

A stopped process keeps its sockets open, so its clients see no refusal and no reset, only
time-outs: a harness that notices a provider only by its death or by failed requests waits
out every read time-out of the case before it can say anything. The provider must be
noticed in seconds, the case called unknown, and the provider restarted for the next case.

Importable as ``tests._hostile_stall:STOPS_PROVIDER`` for ``--system``. It reaches the
provider the way any process of the same user can where workers share the harness's PID
namespace (``CRASH_HARNESS_ISOLATION=off``): by walking ``/proc`` for a child of one of its
own ancestors that is a fake provider.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.reference.ledger import Claim
from harness.reference.worker import ReferenceWorker
from harness.systems import resolve
from harness.worker_config import WorkerConfig

_REF = resolve("reference")

#: env var naming a file: the first STOPS_PROVIDER incarnation of a campaign creates it and
#: writes what it stopped (``{"pid", "stopped_at"}``); later incarnations are the reference
STALL_REPORT_ENV = "CH_TEST_STALL_REPORT"
#: env var: after how many sends of its own the worker stops the provider (1: its first)
STALL_AFTER_ENV = "CH_TEST_STALL_AFTER"


#: how far up the worker looks for the harness (its parent, or a keeper's parent)
_UP = 3


def _ancestors() -> list[int]:
    """This process's parent, grandparent, ... (``_UP`` of them, never pid 1): the harness
    that started the provider is one of them, and nothing further up is this run's."""
    found: list[int] = []
    pid = os.getppid()
    while pid > 1 and pid not in found and len(found) < _UP:
        found.append(pid)
        pid = _ppid(pid)
    return found


def _ppid(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def _is_provider(pid: int) -> bool:
    """A fake provider: forked from the harness it is named ``fp:PRESET``
    (``/proc/<pid>/comm``); started as a new interpreter its argv is ``... -m fake_providers
    serve ...`` (whole words: a shell whose script mentions it is no provider)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return comm.startswith("fp:") or (b"fake_providers" in argv and b"serve" in argv)


def find_providers() -> list[int]:
    """Every fake provider that is a child of one of this process's ancestors."""
    ancestors = set(_ancestors())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if _ppid(pid) in ancestors and _is_provider(pid):
                found.append(pid)
    return sorted(found)


def _stops_provider(config: WorkerConfig) -> None:
    """The reference, except that the campaign's first incarnation, once its first send
    (its ``CH_TEST_STALL_AFTER``-th) is answered, SIGSTOPs every provider it can find and
    goes on with the rest of its work (each further send then waits out its read time-out)."""
    report = Path(os.environ[STALL_REPORT_ENV])
    if report.exists():
        _REF.main(config)
        return

    after = int(os.environ.get(STALL_AFTER_ENV, "1"))

    class Stopper(ReferenceWorker):
        stopped = False
        attempts = 0

        def attempt(self, claim: Claim) -> None:
            super().attempt(claim)
            Stopper.attempts += 1
            if not Stopper.stopped and Stopper.attempts >= after:
                Stopper.stopped = True
                pids = find_providers()
                said: dict[str, Any] = {"pids": pids, "stopped_at": time.time()}
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                report.write_text(json.dumps(said))

    Stopper(config).run()


STOPS_PROVIDER = replace(
    _REF,
    name="tests._hostile_stall:STOPS_PROVIDER",
    description="the reference, which SIGSTOPs the provider after its first accepted message",
    main=_stops_provider,
)
