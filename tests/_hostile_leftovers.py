"""Hostile workers that leave something behind, or take the harness's disk from it.

Importable as ``tests._hostile_leftovers:NAME`` for ``--system`` in subprocess tests
(``tests/test_hostile_leftovers.py``):

- ``ESCAPES``: the reference, after leaving a double-forked ``setsid`` daemon that moves
  itself out of its worker's cgroup when it can (root), waits for its worker to end and then
  opens connections to the provider at the case's epoch and leaves its posts half-sent
  there: what it does after its case ended must not go unseen.
- ``ASKS_OUTSIDE``: hands its provider's URL to a process outside its case (as
  ``systemd-run`` or ``at`` would start one: no child of the harness, in no worker's tree),
  which leaves posts half-sent there; then the reference. Only the connections it holds
  tie that process to the case. The outside process is ``python -m tests._hostile_leftovers
  FIFO``, started by the test before the harness.
- ``FREEZES_DISK``: the reference, then remounts the case's file system read-only (``EROFS``
  for every write of the harness after it).
- ``FILLS_DISK``: writes a file in the case's work dir until the file system is full
  (``ENOSPC``), then goes on as the reference does.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import subprocess
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

from harness.systems import resolve
from harness.worker_config import WorkerConfig

_REF = resolve("reference")

#: env var naming a file: each daemon ``ESCAPES`` leaves appends "pid start_time"
DAEMON_FILE_ENV = "CH_TEST_LEFTOVER_DAEMONS"
#: env var: ``1`` makes the ``ESCAPES`` daemon quiet (it never reaches the provider): then
#: only its parentage ties it to its case
QUIET_ENV = "CH_TEST_LEFTOVER_QUIET"
#: how many requests the daemon leaves half-sent on the provider
HALF_SENT = 20


def _start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


def _leave_cgroup() -> None:
    """Root may write its own pid into the cgroup tree's root: out of its worker's cgroup."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"]]
    for mount in mounts:
        with contextlib.suppress(OSError), open(os.path.join(mount, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def _half_sent(url: str) -> list[socket.socket]:
    """``HALF_SENT`` connections to the provider, each with a request whose body never ends."""
    parts = urlsplit(url)
    held = []
    for _ in range(HALF_SENT):
        sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80))
        head = (
            f"POST {parts.path.rstrip('/')}/v1/messages HTTP/1.1\r\n"
            f"Host: {parts.netloc}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n{"
        )
        sock.sendall(head.encode())
        held.append(sock)
    return held


def _daemon(config: WorkerConfig, worker: int, ready_w: int) -> None:  # pragma: no cover
    """The daemon's life: out of the cgroup, wait for the worker's end, then reach the
    provider of a case that is over, and stay."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    _leave_cgroup()
    me = os.getpid()
    with open(os.environ[DAEMON_FILE_ENV], "a") as f:
        f.write(f"{me} {_start_time(me)}\n")
    os.write(ready_w, b"ready")
    os.close(ready_w)
    with contextlib.suppress(OSError):
        fd = os.pidfd_open(worker)
        select.select([fd], [], [])  # the worker's first process has ended: the case is over
    held: list[socket.socket] = []  # kept open for as long as the daemon lives
    if os.environ.get(QUIET_ENV) != "1":
        with contextlib.suppress(OSError):
            held += _half_sent(config.provider_url)
    while True:
        signal.pause()


def _escapes(config: WorkerConfig) -> None:
    """Leave the daemon (fork, ``setsid``, fork, the middle one exits), then the reference."""
    worker = os.getpid()
    ready_r, ready_w = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - the middle process
        os.setsid()
        if os.fork() == 0:
            os.close(ready_r)
            _daemon(config, worker, ready_w)
        os._exit(0)
    os.close(ready_w)
    os.waitpid(middle, 0)
    os.read(ready_r, 5)  # the daemon is recorded (or gone, and the test will say so)
    os.close(ready_r)
    _REF.main(config)


#: env var naming the FIFO on which ASKS_OUTSIDE hands its provider URL out (``FIFO.ack``:
#: where the outside process says it holds its connections, with its pid)
OUTSIDE_FIFO_ENV = "CH_TEST_OUTSIDE_FIFO"


def _asks_outside(config: WorkerConfig) -> None:
    """Hand the provider URL out, wait until the outside process holds its half-sent posts
    there, then the reference."""
    fifo = os.environ[OUTSIDE_FIFO_ENV]
    with open(fifo, "w") as f:
        f.write(config.provider_url + "\n")
    with open(fifo + ".ack") as f:
        f.readline()
    _REF.main(config)


def outside(fifo: str) -> None:  # pragma: no cover - a process of its own
    """The process outside the case: take a URL, leave posts half-sent there, say so, stay."""
    with open(fifo) as f:
        url = f.readline().strip()
    held = _half_sent(url)
    with open(fifo + ".ack", "w") as f:
        f.write(f"{os.getpid()} {len(held)}\n")
    while True:
        signal.pause()


#: env var naming a file: FILLS_DISK writes there how many bytes it wrote and what stopped it
FILLED_FILE_ENV = "CH_TEST_FILLED"


def _fills_disk(config: WorkerConfig) -> None:
    """Fill the file system of the case's ledger (its work dir) to the last byte, then go on
    as the reference does: whatever fails next is the full disk's doing, not the worker's."""
    database = make_url(config.db.url).database if hasattr(config.db, "url") else None
    where = Path(database).parent if database else Path.cwd()
    written = 0
    stopped = ""
    chunk = b"\0" * (1 << 16)
    try:
        with open(where / "ballast.bin", "wb", buffering=0) as f:
            while True:
                written += f.write(chunk)
    except OSError as exc:
        stopped = errno.errorcode.get(exc.errno or 0, str(exc))
    # then byte by byte, so not even a small write fits any more
    with contextlib.suppress(OSError), open(where / "ballast-tail.bin", "wb", buffering=0) as f:
        while f.write(b"\0"):
            written += 1
    note = os.environ.get(FILLED_FILE_ENV)
    if note:
        with contextlib.suppress(OSError):
            Path(note).write_text(json.dumps({"written": written, "stopped": stopped}))
    _REF.main(config)


ESCAPES = replace(
    _REF,
    name="tests._hostile_leftovers:ESCAPES",
    description="the reference, leaving a daemon that escapes its cgroup and posts late",
    main=_escapes,
)
#: env var naming the mount point FREEZES_DISK remounts read-only (in the test's own mount
#: namespace: the machine's mounts are never touched)
READ_ONLY_MOUNT_ENV = "CH_TEST_READ_ONLY_MOUNT"


def _freezes_disk(config: WorkerConfig) -> None:
    """The reference, then the case's file system remounted read-only under the harness's
    feet (root may): the harness's next write (the trace line of this worker's end) fails."""
    _REF.main(config)
    where = os.environ[READ_ONLY_MOUNT_ENV]
    # a read-only bind of the place over itself: what is open stays writable (a tmpfs with
    # files open for writing cannot be remounted read-only), every new open is refused
    for words in (["--bind", where, where], ["-o", "remount,bind,ro", where]):
        subprocess.run(["mount", *words], check=True, capture_output=True)


ASKS_OUTSIDE = replace(
    _REF,
    name="tests._hostile_leftovers:ASKS_OUTSIDE",
    description="the reference, after a process outside its case left posts half-sent",
    main=_asks_outside,
)
FREEZES_DISK = replace(
    _REF,
    name="tests._hostile_leftovers:FREEZES_DISK",
    description="the reference, then its work dir's file system remounted read-only",
    main=_freezes_disk,
)
FILLS_DISK = replace(
    _REF,
    name="tests._hostile_leftovers:FILLS_DISK",
    description="fills the work dir's file system, then the reference",
    main=_fills_disk,
)


if __name__ == "__main__":  # pragma: no cover
    import sys

    outside(sys.argv[1])
