"""A PostgreSQL server of the harness's own, for the cases that restart the database.

``db_restart`` stops and starts the database server under a running worker. The harness
never does that to a server it was given (``--db``): other runs, other teams and the CI's own
tests share it. It makes a throwaway cluster instead, with the machine's own PostgreSQL
binaries (``initdb`` and ``postgres`` from ``/usr/lib/postgresql/*/bin`` or ``PATH``), in a
directory of its own, listening on loopback at a free port and on a socket of its own, with
trust authentication; it is the harness's child, so it dies with the
harness (``PR_SET_PDEATHSIG``) even when the harness is killed, and its data directory is
removed when the campaign ends.

Run as root (CI), the server runs as the ``postgres`` user, which PostgreSQL insists on.
"""

from __future__ import annotations

import contextlib
import ctypes
import grp
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.engine.process import _leftovers
from harness.engine.store import _owner, _scratch
from harness.errors import BadInputError

#: how long a start may take before the harness gives up on the server (a busy 2-core
#: runner starts one in ~0.3 s)
START_TIMEOUT_S = 60.0
#: how long a fast shutdown may take before the server is killed
STOP_TIMEOUT_S = 30.0
#: the database every case's schema lives in
DATABASE = "postgres"

_PR_SET_PDEATHSIG = 1


def binaries() -> Path | None:
    """The directory of the machine's PostgreSQL server binaries (newest major first), or
    None when there are none."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
        reverse=True,
    )
    if found:
        return found[0].parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def unavailable() -> str | None:
    """Why no throwaway cluster can be made on this machine (None: one can)."""
    if binaries() is None:
        return (
            "no PostgreSQL server binaries on this machine (initdb and postgres: Debian's"
            " postgresql package puts them in /usr/lib/postgresql/N/bin)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run a server as"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """In the server's child, after its user is set: SIGKILL it when the harness dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class Cluster:
    """A running throwaway cluster: ``url`` for SQLAlchemy, ``restart()`` for the fault."""

    root: Path
    port: int
    bindir: Path
    user: str | None  # the account the server runs as when the harness is root
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    log: Path = field(init=False)
    #: the process that started it (its parent: the only one that may stop or restart it)
    owner_pid: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        self.log = self.root / "server.log"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    str(self.bindir / "postgres"),
                    *("-D", str(self.data)),
                    *("-p", str(self.port)),
                    *("-c", "listen_addresses=127.0.0.1"),
                    # TCP only: a socket path under a deep work dir passes the 107-byte limit
                    *("-c", "unix_socket_directories="),
                    *("-c", "fsync=off"),  # a throwaway: durability against power loss
                    *("-c", "max_connections=200"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
                start_new_session=True,  # a Ctrl-C meant for the harness is not its
                user=self.user,
                group=self.user,
            )
        # the harness's own child: never taken for an orphan of a worker and killed
        _leftovers.HARNESS_PIDS.add(self.process.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None:
                raise BadInputError(
                    f"the throwaway PostgreSQL server in {self.root} exited with"
                    f" {self.process.returncode} as it started: {self._log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise BadInputError(
                    f"the throwaway PostgreSQL server in {self.root} did not take"
                    f" connections within {START_TIMEOUT_S:g}s: {self._log_tail()}"
                )
            time.sleep(0.05)

    def _answers(self) -> bool:
        done = subprocess.run(
            [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
            check=False,
            capture_output=True,
        )
        return done.returncode == 0

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-3:])
        return "(no log)"

    def stop(self, how: signal.Signals = signal.SIGINT) -> None:
        """Stop the server: ``SIGINT`` is PostgreSQL's fast shutdown (every session is
        ended, as a restart by an operator does), ``SIGQUIT`` its immediate one (a crash:
        recovery from the WAL at the next start)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(how)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        with contextlib.suppress(ProcessLookupError):  # a backend it left behind
            os.killpg(process.pid, signal.SIGKILL)
        _leftovers.HARNESS_PIDS.discard(process.pid)

    def restart(self, how: signal.Signals = signal.SIGINT) -> float:
        """Stop and start again on the same data and port; seconds it was down."""
        began = time.monotonic()
        self.stop(how)
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    def remove(self) -> None:
        """Stop it and remove its data directory."""
        _OWN.pop(self.port, None)
        self.stop(signal.SIGQUIT)
        shutil.rmtree(self.root, ignore_errors=True)


#: this process's throwaway servers by port: the only servers a fault may restart
_OWN: dict[int, Cluster] = {}


def owning(url: str) -> Cluster | None:
    """The throwaway server this process made that ``url`` points at; None for any other
    (a server the harness was given is never restarted)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    found = _OWN.get(parsed.port or 0)
    if found is None or parsed.host != "127.0.0.1" or found.process is None:
        return None
    if found.process.pid and os.getpid() != found.owner_pid:
        return None  # a forked job's copy: the server is its parent's child, not its own
    return found


def _reachable_by(entry: pwd.struct_passwd, folder: Path) -> bool:
    """Whether the account ``entry`` may pass through every folder down to ``folder``."""
    groups = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem}
    for each in (folder, *folder.parents):
        try:
            st = each.stat()
        except OSError:
            return False
        if st.st_uid == entry.pw_uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


def create() -> Cluster:
    """A new cluster, started, in a work dir of its own (``_scratch``: tagged with this
    process, so a run killed before it could remove it has it swept by the next)."""
    why = unavailable()
    if why is not None:
        raise BadInputError(f"cannot make a throwaway PostgreSQL server: {why}")
    bindir = binaries()
    assert bindir is not None
    user = "postgres" if os.geteuid() == 0 else None
    root = _scratch.make_workdir(f"{_scratch.PREFIX}pg-")
    if user is not None:
        entry = pwd.getpwnam(user)
        if not _reachable_by(entry, root.parent):
            # a private scratch root (a test's tmp_path): the server's user could not get
            # to its own data; the system's temporary directory, which anyone may enter
            shutil.rmtree(root)
            root = Path(tempfile.mkdtemp(prefix=f"{_scratch.PREFIX}pg-"))
            (root / _scratch.OWNER_FILE).write_text(_owner.me().tag() + "\n")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    os.chmod(root, 0o700)  # initdb insists its data directory's parent is private too
    done = subprocess.run(
        [
            str(bindir / "initdb"),
            *("-D", str(root / "data")),
            *("-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"),
        ],
        capture_output=True,
        text=True,
        check=False,
        user=user,
        group=user,
    )
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise BadInputError(
            f"initdb for a throwaway PostgreSQL server failed ({done.returncode}):"
            f" {(done.stderr or done.stdout).strip()[-500:]}"
        )
    for attempt in range(5):  # a free port may be taken between the look and the bind
        cluster = Cluster(root=root, port=free_port(), bindir=bindir, user=user)
        try:
            cluster.start()
            _OWN[cluster.port] = cluster
            return cluster
        except BadInputError:
            if attempt == 4 or "could not bind" not in cluster._log_tail():
                cluster.remove()
                raise
    raise AssertionError("unreachable")
