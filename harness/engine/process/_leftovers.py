"""What a case left running: found, named, stopped, and never part of a pass.

A worker's tree is killed when its first process ends (``supervisor``), but a process can
leave the tree: a root worker writes its pid into another cgroup, a daemon double-forks
away. Nothing of a case may outlive it, so the harness looks three ways, none of which
needs the kernel's namespaces (``CRASH_HARNESS_ISOLATION=off`` keeps all three):

- the harness is a **child subreaper**: a process whose parent dies is re-parented to it
  (the nearest subreaper above), not to init, wherever its cgroup is. A child of the
  harness that it never started, found outside every live worker's tree, is a leftover;
- the **provider's connections**: any process, started by no one the harness knows, that
  holds a TCP connection to a provider of the case (a half-sent request in particular,
  which the provider itself cannot tie to an epoch) is a leftover, found by the socket's
  inode in ``/proc/net/tcp`` and the process's descriptors;
- the **stragglers** of each worker (processes of its tree still running when its first
  process ended), named as they were killed.

Each is stopped (SIGSTOP over it and its descendants, then SIGKILL) before the next case
opens, and named with its pid, its command line and what it held. A leftover makes a case
that would have passed *unknown*: what it did after its worker ended is not known, and it
is never a violation on that ground alone (``campaign._verdict``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harness.engine.process import _tree
from harness.engine.store import _secrets

#: prctl: make this process the reaper of its descendants' orphans
_PR_SET_CHILD_SUBREAPER = 36
#: how much of a leftover's command line the reports carry
COMMAND_CHARS = 200
#: pids of processes the harness made on purpose that are not workers (parallel jobs, a
#: forked explore search): never a leftover, whoever's child they are
HARNESS_PIDS: set[int] = set()


@dataclass(frozen=True)
class Leftover:
    """One process that outlived its part of a case."""

    pid: int
    #: its command line (scrubbed of secrets, cut at ``COMMAND_CHARS``)
    command: str
    #: what tied it to the case (its worker's tree, an escape, connections to a provider)
    held: str
    #: whether the harness stopped it (it is gone); False: it could not be killed
    stopped: bool = True

    def line(self) -> str:
        """One sentence for the console and every report."""
        fate = "the harness killed it" if self.stopped else "the harness could NOT kill it"
        return f"pid {self.pid} ({self.command}) {self.held}; {fate}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "command": self.command,
            "held": self.held,
            "stopped": self.stopped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Leftover:
        return cls(int(data["pid"]), str(data["command"]), str(data["held"]), bool(data["stopped"]))


def become_subreaper(*, on: bool = True) -> bool:
    """Make this process (the harness) the reaper of its descendants' orphans, or stop."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except OSError:
        return False


def command_of(pid: int) -> str:
    """``pid``'s command line, as the reports show it."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
        text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        if not text:
            with open(f"/proc/{pid}/comm", "rb") as f:
                text = "[" + f.read().strip().decode(errors="replace") + "]"
    except OSError:
        return "?"
    text = _secrets.scrub(text)
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS] + "…"


def children() -> list[tuple[int, str]]:
    """(pid, state letter) of every child of this process."""
    me = os.getpid()
    found = []
    with contextlib.suppress(OSError):
        with open(f"/proc/{me}/task/{me}/children") as f:
            pids = {int(p) for p in f.read().split()}
        for task in os.listdir(f"/proc/{me}/task"):  # children of every thread of the harness
            if task != str(me):
                with contextlib.suppress(OSError), open(f"/proc/{me}/task/{task}/children") as f:
                    pids |= {int(p) for p in f.read().split()}
        for pid in sorted(pids):
            found.append((pid, _state(pid)))
    return found


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "X"
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def adopted(known: Iterable[int], inside: Iterable[int]) -> set[int]:
    """Children of the harness it never started (orphans it was handed as subreaper) that
    are in no live worker's tree (``inside``): escaped. Their dead are reaped here."""
    skip = set(known) | set(inside) | HARNESS_PIDS
    out = set()
    for pid, state in children():
        if pid in skip:
            continue
        if state in ("Z", "X"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            continue
        out.add(pid)
    return out


def reap_adopted(known: Iterable[int]) -> None:
    """Reap every dead child of the harness it did not start itself (a killed orphan)."""
    skip = set(known) | HARNESS_PIDS
    for pid, state in children():
        if pid not in skip and state in ("Z", "X"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


#: netlink: the sock_diag family, its one message type, and the flags of a dump request
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_DUMP_REQUEST = 0x1 | 0x300
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
#: every TCP state but TIME_WAIT (6) and LISTEN (10): a machine that ran many cases has
#: thousands of the former, which /proc/net/tcp spells out one line each (75 ms measured on
#: a 4,000-line table); the kernel filters them out of a sock_diag dump for free
_LIVE_STATES = 0xFFF & ~(1 << 6) & ~(1 << 10)


def _sockets_to(ports: set[int]) -> dict[int, str]:
    """socket inode -> ``port N`` of every live TCP connection whose far end is one of
    ``ports`` on this machine's loopback (a client of a provider): asked of the kernel by
    sock_diag, else read from /proc/net/tcp and tcp6."""
    try:
        return _diag_sockets_to(ports)
    except OSError:
        return _proc_sockets_to(ports)


def _diag_sockets_to(ports: set[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        for family in (socket.AF_INET, socket.AF_INET6):
            request = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 0, 0, _LIVE_STATES)
            header = struct.pack(
                "=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_DUMP_REQUEST, 1, 0
            )
            nl.send(header + request)
            done = False
            while not done:
                data = nl.recv(1 << 16)
                offset = 0
                while offset + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, offset)
                    if kind == _NLMSG_DONE:
                        done = True
                        break
                    if kind == _NLMSG_ERROR:
                        raise OSError("sock_diag refused the dump")
                    body = offset + 16
                    dport = struct.unpack_from("!H", data, body + 6)[0]
                    dst = data[body + 24 : body + 40]
                    inode = struct.unpack_from("=I", data, body + 68)[0]
                    far = dst[:4] if family == socket.AF_INET else dst
                    if inode and dport in ports and _loopback_bytes(far):
                        found[inode] = f"port {dport}"
                    offset += (length + 3) & ~3
                if not data:
                    break
    return found


def _loopback_bytes(addr: bytes) -> bool:
    """127.0.0.0/8, ``::1`` or ``::ffff:127.x``, in network byte order."""
    if len(addr) == 4:
        return addr[0] == 127
    return addr == bytes(15) + b"\x01" or (addr[:12] == bytes(10) + b"\xff\xff" and addr[12] == 127)


def _proc_sockets_to(ports: set[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10:
                continue
            remote, inode = fields[2], int(fields[9])
            host, _, port_hex = remote.rpartition(":")
            port = int(port_hex, 16)
            if inode and port in ports and _loopback(host):
                found[inode] = f"port {port}"
    return found


def _loopback(host: str) -> bool:
    """Whether a /proc/net/tcp{,6} address (hex, in the kernel's byte order) is this
    machine's loopback, where the providers listen: 127.0.0.0/8, ``::1`` or ``::ffff:127.x``
    (a far end elsewhere with the same port number is someone else's connection)."""
    if len(host) == 8:
        return host[-2:] == "7F"
    v4_mapped = host[:24] == "0000000000000000FFFF0000" and host[-2:] == "7F"
    return v4_mapped or host == "00000000000000000000000001000000"


def _ancestors() -> set[int]:
    """This process's ancestors up to init: whatever a scan finds, never stopped."""
    out: set[int] = set()
    pid = os.getpid()
    of = _tree.parents()
    while pid in of and pid not in out:
        out.add(pid)
        pid = of[pid]
    return out | {0, 1}


def _inodes_of(pid: int | str) -> set[int]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    out.add(int(link[8:-1]))
    return out


def clients(ports: dict[int, str], known: Iterable[int]) -> dict[int, list[str]]:
    """pid -> what it holds, for every process that holds a connection to one of ``ports``
    (port -> the provider's name) and is not ``known`` (the harness, its providers, its
    jobs). Cheap when there are none: the descriptors of other processes are read only when
    a connection to a provider is held by something other than the harness itself."""
    sockets = _sockets_to(set(ports))
    skip = set(known) | HARNESS_PIDS | {os.getpid()}
    for pid in skip:
        for inode in _inodes_of(pid):
            sockets.pop(inode, None)
    if not sockets:
        return {}
    held: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        mine = _inodes_of(entry) & set(sockets)
        if not mine:
            continue
        by_port: dict[str, int] = {}
        for inode in mine:
            by_port[sockets[inode]] = by_port.get(sockets[inode], 0) + 1
        held[int(entry)] = [
            f"{n} connection(s) to provider {ports[int(where.split()[1])]} ({where})"
            for where, n in sorted(by_port.items())
        ]
    return held


def stop(pids: Iterable[int]) -> set[int]:
    """SIGSTOP each of ``pids`` and its descendants until none is new, then SIGKILL them
    all and wait for them to end; returns those still alive after (none, unless the kernel
    would not let this process kill them)."""
    spared = _ancestors()  # never the harness's own line, whatever was found
    roots = set(pids) - spared

    def members() -> set[int]:
        out: set[int] = set()
        for pid in roots:
            out |= _tree._descendants(pid)
        return out - spared

    if not roots:
        return set()
    stopped = _tree._stop_all(members, os.getpid())
    _tree._kill_and_await(stopped | roots)
    for pid in stopped | roots:  # the harness's own children (adopted) are reaped now
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return {pid for pid in set(pids) if not _tree.dying(pid)}


def collect(found: dict[int, str]) -> list[Leftover]:
    """Name each process of ``found`` (pid -> what it held), stop them all, and say so."""
    if not found:
        return []
    named = {pid: command_of(pid) for pid in found}
    alive = stop(found)
    return [Leftover(pid, named[pid], found[pid], pid not in alive) for pid in sorted(found)]
