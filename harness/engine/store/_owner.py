"""Which run made a scratch directory or a PostgreSQL schema, and whether that run is gone.

A harness killed with SIGKILL cannot clean up after itself, so what it makes carries a tag
naming its maker: process id, that process's start time (a reused pid has another), the
boot and the host. The next run, or ``crash-harness clean``, removes what a dead run left and
never touches what a live run (here or on another host sharing the database) still uses.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

#: how every tag starts: the proof that a thing is ours, not merely named like ours
PREFIX = "crash-harness owner"
_TAG = re.compile(
    r"^crash-harness owner pid=(?P<pid>\d+) start=(?P<start>\d+) boot=(?P<boot>[\w-]+)"
    r" host=(?P<host>[\w.-]+)$"
)


@dataclass(frozen=True)
class Owner:
    pid: int
    start: int
    boot: str
    host: str

    def tag(self) -> str:
        return f"{PREFIX} pid={self.pid} start={self.start} boot={self.boot} host={self.host}"


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[19])  # field 22: start time in ticks


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _host() -> str:
    return re.sub(r"[^\w.-]", "_", socket.gethostname()) or "unknown"


def me() -> Owner:
    """This process as an owner."""
    pid = os.getpid()
    return Owner(pid, start_time(pid) or 0, _boot_id(), _host())


def parse(tag: str) -> Owner | None:
    """The owner a tag names; None for anything not written by ``Owner.tag``."""
    m = _TAG.match(tag.strip())
    if m is None:
        return None
    return Owner(int(m["pid"]), int(m["start"]), m["boot"], m["host"])


def started_at(owner: Owner) -> float | None:
    """When the owner's process started (POSIX seconds), if it ran on this host since boot."""
    if owner.host != _host() or owner.boot != _boot_id():
        return None
    try:
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return btime + owner.start / os.sysconf("SC_CLK_TCK")


def is_gone(owner: Owner) -> bool:
    """True only when provably dead: on this host, made before its last boot or by a pid that
    no longer runs with that start time. A run on another host (sharing the database) cannot
    be proven dead from here, so it is never called gone."""
    if owner.host != _host():
        return False
    if owner.boot != _boot_id():
        return True
    return start_time(owner.pid) != owner.start
