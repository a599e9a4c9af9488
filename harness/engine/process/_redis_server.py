"""A Redis broker of the harness's own, for the cases that restart the broker.

``broker_restart`` restarts the broker under a running worker. A queue worker's broker is
shared in production as in CI (the machine's Redis holds other runs' keys, other teams'
queues), so the harness never restarts one it was given: a scenario with a ``[broker]``
table gets a Redis server the harness starts for the campaign (``redis-server`` from
``PATH``), on loopback at a free port, with a password of its own (no other run on the
machine can reach its cases' queues), persisting as the scenario says: ``none`` (Redis with
``save ""`` and no AOF: a restart empties it, as many a cache-configured broker does) or
``aof`` (every write appended and fsynced). It is the harness's child (``PR_SET_PDEATHSIG``)
and its directory is removed when the campaign ends. Every case starts on an empty broker
(``FLUSHALL``): the campaign's cases run one after another on it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from harness.engine.process import _leftovers
from harness.engine.process._pg_cluster import die_with_parent, free_port
from harness.engine.store import _scratch
from harness.errors import BadInputError

#: what a ``[broker] persistence`` may be
PERSISTENCE = ("none", "aof")
#: how long a start may take
START_TIMEOUT_S = 30.0
#: how long a shutdown (SIGTERM: Redis fsyncs its AOF and exits) may take before SIGKILL
STOP_TIMEOUT_S = 30.0


def unavailable() -> str | None:
    """Why no Redis broker can be started here (None: one can)."""
    if shutil.which("redis-server") is None:
        return "no redis-server on PATH (Debian: apt-get install redis-server)"
    return None


@dataclass
class RedisServer:
    """A running Redis of the harness's: ``url`` for the workers, ``restart()`` for the
    fault, ``flush()`` before each case."""

    root: Path
    port: int
    persistence: str
    password: str
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    #: the process that started it (its parent: the only one that may restart it)
    owner_pid: int = field(default_factory=os.getpid)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        aof = self.persistence == "aof"
        args = [
            shutil.which("redis-server") or "redis-server",
            *("--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes"),
            *("--requirepass", self.password, "--dir", str(self.root)),
            *("--save", "", "--appendonly", "yes" if aof else "no"),
            *("--appendfsync", "always", "--daemonize", "no"),
            *("--logfile", str(self.root / "redis.log")),
        ]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )
        _leftovers.HARNESS_PIDS.add(self.process.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None:
                raise BadInputError(
                    f"the harness's Redis broker exited with {self.process.returncode} as it"
                    f" started: {self._log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise BadInputError(
                    f"the harness's Redis broker did not answer within {START_TIMEOUT_S:g}s:"
                    f" {self._log_tail()}"
                )
            time.sleep(0.02)

    def command(self, *words: str) -> bytes:
        """One command, authenticated (RESP written by hand: no client library needed)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            for cmd in (("AUTH", self.password), words):
                conn.sendall(_resp(cmd))
                reply = conn.recv(65536)
                if reply.startswith(b"-"):
                    raise OSError(reply.decode(errors="replace").strip())
            return reply

    def _answers(self) -> bool:
        try:
            return self.command("PING").startswith(b"+PONG")
        except OSError:
            return False

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = (self.root / "redis.log").read_text(errors="replace").strip().splitlines()
            return " | ".join(lines[-3:])
        return "(no log)"

    def flush(self) -> None:
        """Empty it for the next case (and its AOF with it)."""
        self.command("FLUSHALL")

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """``SIGTERM``: Redis's own shutdown (an AOF is fsynced, nothing else is kept);
        ``SIGKILL``: a crash."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(how)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _leftovers.HARNESS_PIDS.discard(process.pid)

    def restart(self) -> float:
        """Stop (Redis's shutdown) and start again on the same dir and port; seconds down."""
        began = time.monotonic()
        self.stop()
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    def keys(self) -> int:
        """How many keys it holds (``DBSIZE``)."""
        reply = self.command("DBSIZE")
        return int(reply[1:].strip() or 0)

    def remove(self) -> None:
        _OWN.pop(self.port, None)
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


#: this process's brokers by port: the only ones a fault may restart
_OWN: dict[int, RedisServer] = {}


def owning(url: str | None) -> RedisServer | None:
    """The broker this process started that ``url`` points at; None for any other (a
    forked job's copy of its parent's included: that one is its parent's child)."""
    if url is None:
        return None
    port = urlsplit(url).port
    found = _OWN.get(port or 0)
    if found is None or found.owner_pid != os.getpid():
        return None
    return found


def _resp(words: tuple[str, ...]) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        data = word.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def create(persistence: str) -> RedisServer:
    """A new Redis broker, started, in a work dir of its own."""
    why = unavailable()
    if why is not None:
        raise BadInputError(f"cannot start a Redis broker for [broker]: {why}")
    if persistence not in PERSISTENCE:
        raise BadInputError(f"[broker] persistence: expected none or aof, got {persistence!r}")
    root = _scratch.make_workdir(f"{_scratch.PREFIX}redis-")
    password = secrets.token_urlsafe(18)
    for attempt in range(5):  # a free port may be taken between the look and the bind
        server = RedisServer(root, free_port(), persistence, password)
        try:
            server.start()
            _OWN[server.port] = server
            return server
        except BadInputError:
            if attempt == 4:
                server.remove()
                raise
    raise AssertionError("unreachable")
