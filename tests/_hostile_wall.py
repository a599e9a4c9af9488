"""Hostile workers against the wall (``harness.engine.process._wall``): each does the reference's
work
correctly, then tries to reach the judge, and writes down what it managed in the JSON file
named by ``CH_TEST_HOSTILE_REPORT`` (tests/test_hostile_wall.py reads it).

- ``PTRACES``: ``PTRACE_ATTACH`` and ``PTRACE_SEIZE`` of its parent (the harness, without
  the wall) and of every sibling it can see (the provider is one).
- ``READS``: lists the campaign's work dir around its own case dir and reads every file of
  other cases and the provider's effect log it finds there, and lists the scratch root.
- ``ADMIN``: walks the memory it inherited from the harness for admin clients and provider
  handles and tries every token it finds on the provider's admin API.
- ``ESCAPES``: a root worker that writes its pid into the root cgroup's ``cgroup.procs``,
  then leaves a double-forked ``setsid`` daemon that holds a lock on the file named by
  ``CH_TEST_DAEMON_LOCK`` for as long as it lives (at most ``DAEMON_LIFE_S``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.reference.worker import ReferenceWorker
from harness.systems import System, resolve
from harness.worker_config import WorkerConfig

#: env var: where each hostile worker writes what it managed
REPORT_ENV = "CH_TEST_HOSTILE_REPORT"
#: env var: the file the ESCAPES daemon holds a lock on while it lives
DAEMON_LOCK_ENV = "CH_TEST_DAEMON_LOCK"
#: how long an escaped daemon lives at most (so a failing run leaves nothing for long)
DAEMON_LIFE_S = 60.0

_PTRACE_ATTACH = 16
_PTRACE_DETACH = 17
_PTRACE_SEIZE = 0x4206
_WALL = 0x40000000

_REF = resolve("reference")


def _report(update: dict[str, Any]) -> None:
    """Merge ``update`` into the report file (several workers of one campaign share it)."""
    path = Path(os.environ[REPORT_ENV])
    report: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        report = json.loads(path.read_text())
    for key, value in update.items():
        if isinstance(value, list):
            report.setdefault(key, []).extend(value)
        else:
            report[key] = value
    path.write_text(json.dumps(report))


def _work(config: WorkerConfig) -> None:
    ReferenceWorker(config).run()


def _status(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def _ptraces(config: WorkerConfig) -> None:
    """Attach to the harness, the provider and anything else in sight, then let go."""
    _work(config)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    me, parent = os.getpid(), os.getppid()
    try:
        ours = b"harness" in Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        ours = False
    # only its own kin, and only under a harness: a worker orphaned to the machine's init
    # must never stop every service on a shared machine (it did once, in development)
    targets = {parent: "parent (the harness, without a wall)"} if ours else {}
    for entry in Path("/proc").iterdir() if ours else ():
        kin = entry.name.isdigit() and f"\nPPid:\t{parent}\n" in _status(entry.name)
        if kin and int(entry.name) != me:
            targets.setdefault(int(entry.name), "sibling (the provider)")
    attached: list[str] = []
    refused: list[str] = []
    for pid, what in sorted(targets.items()):
        for name, request in (("PTRACE_ATTACH", _PTRACE_ATTACH), ("PTRACE_SEIZE", _PTRACE_SEIZE)):
            if libc.ptrace(request, pid, None, None) == 0:
                attached.append(f"{name} {pid} {what}")
                if request == _PTRACE_ATTACH:  # take the SIGSTOP it sent, or it stays stopped
                    with contextlib.suppress(OSError):
                        os.waitpid(pid, _WALL)
                libc.ptrace(_PTRACE_DETACH, pid, None, None)
            else:
                refused.append(f"{name} {pid} {what}: {os.strerror(ctypes.get_errno())}")
    _report(
        {
            "attached": attached,
            "refused": refused,
            "siblings": [f"{p} {w}" for p, w in targets.items() if w.startswith("sibling")],
        }
    )


def _case_dir() -> Path:
    """This worker's case dir: where its trace goes (the harness set it up in this process)."""
    from harness.engine.process import _boundary

    tracer = _boundary._tracer
    assert tracer is not None, "no boundary tracer in this worker"
    return Path(tracer.trace_path).parent


def _reads(config: WorkerConfig) -> None:
    """Read what lies around its own case dir: other cases' files, the provider's log."""
    _work(config)
    own = _case_dir()
    campaign = own.parent
    read: list[str] = []
    seen: list[str] = []
    with contextlib.suppress(OSError):
        for entry in campaign.iterdir():
            if entry == own:
                continue
            seen.append(entry.name)
            files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
            for path in files:
                with contextlib.suppress(OSError):
                    path.read_bytes()
                    read.append(str(path.relative_to(campaign)))
    scratch = campaign.parent
    others: list[str] = []
    with contextlib.suppress(OSError):
        others = [e.name for e in scratch.iterdir() if e != campaign]
    _report({"seen": seen, "read": read, "scratch_others": others})


def _admin(config: WorkerConfig) -> None:
    """Try every admin token its inherited memory holds on the provider's admin API."""
    import requests

    from fake_providers import AdminClient, ProviderProcess

    _work(config)
    tokens: list[tuple[str, str]] = []
    clients = 0
    for obj in gc.get_objects():
        if isinstance(obj, AdminClient):
            clients += 1
            token = obj._session.headers.get("X-Admin-Token")
            if isinstance(token, str) and token.strip("\0"):
                tokens.append(("AdminClient", token))
        elif isinstance(obj, ProviderProcess):
            token = obj._admin_token
            if token.strip("\0"):
                tokens.append(("ProviderProcess", token))
    base = config.provider_url.split("/epoch/", 1)[0]
    opened: list[str] = []
    for where, token in tokens:
        answer = requests.get(
            f"{base}/_admin/effects", headers={"X-Admin-Token": token}, timeout=10
        )
        if answer.status_code == 200:
            opened.append(where)
    _report({"clients_found": [clients], "tokens_found": len(tokens), "opened": opened})


def _escapes(config: WorkerConfig) -> None:
    """Move to the root cgroup, then leave a daemon behind that holds a lock while it lives."""
    _work(config)
    moved: list[str] = []
    refused: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if fields[2] != "cgroup2":
                continue
            try:
                Path(fields[1], "cgroup.procs").write_text(str(os.getpid()))
                moved.append(fields[1])
            except OSError as exc:
                refused.append(f"{fields[1]}: {exc.strerror}")
    _report({"moved": moved, "cgroup_refused": refused, "euid": os.geteuid()})
    lock = os.environ[DAEMON_LOCK_ENV]
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # the daemon: its parent gone, in its own session
            os.close(ready_r)
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(ready_w, b"x")
            os.close(ready_w)
            deadline = time.monotonic() + DAEMON_LIFE_S
            while time.monotonic() < deadline and os.path.exists(lock):
                time.sleep(0.2)
            os._exit(0)
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)  # the daemon holds its lock: the case may end now


def _hostile(attr: str, description: str, main: Any) -> System:
    return replace(_REF, name=f"tests._hostile_wall:{attr}", description=description, main=main)


PTRACES = _hostile("PTRACES", "attaches a debugger to the harness and the provider", _ptraces)
READS = _hostile("READS", "reads other cases' files and the provider's log", _reads)
ADMIN = _hostile("ADMIN", "tries the admin tokens in the memory it inherited", _admin)
ESCAPES = _hostile("ESCAPES", "leaves its cgroup and leaves a daemon behind", _escapes)
