"""Deliberately misbehaving systems that the harness must report, never pass.

Importable as ``tests._systems:NAME`` for ``--system`` in subprocess tests.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Engine

from harness.invariants import LedgerSnapshot
from harness.reference.worker import ReferenceWorker
from harness.systems import System, resolve
from harness.worker_config import WorkerConfig

_REF = resolve("reference")


def _on_reference(
    attr: str, description: str, main: Callable[[WorkerConfig], None], **extra: Any
) -> System:
    """A system on the reference's schema and ledger reader, with its own worker: importable
    as ``tests._systems:ATTR``."""
    return replace(_REF, name=f"tests._systems:{attr}", description=description, main=main, **extra)


def _dies(config: WorkerConfig) -> None:
    raise RuntimeError("worker exploded on its own")


def _hangs(config: WorkerConfig) -> None:
    ready = os.environ.get("CH_TEST_READY_FIFO")
    if ready:
        with open(ready, "w") as fifo:  # tells the test a worker is running, without sleeps
            fifo.write("ready\n")
    signal.pause()
    while True:  # pragma: no cover - only a signal ends this
        signal.pause()


def _loses_everything(config: WorkerConfig) -> None:
    """Does the work but never delivers: a silent loss the harness must flag."""
    worker = ReferenceWorker(config)
    try:
        for run in worker.ledger.pending_runs():
            result = worker.compose(run)
            worker.ledger.commit_result(
                run,
                step_id="compose",
                result_body=result,
                destinations=worker.ledger.resolve_destinations(run.topic),
            )
    finally:
        worker.engine.dispose()


#: the marker file whose absence makes ``FLAKY`` misread its ledger once (set by the test)
FLAKY_MARKER_ENV = "CH_TEST_FLAKY_MARKER"


def _reads_wrong_once(engine: Engine) -> LedgerSnapshot:
    """The reference's ledger, except the first time it is ever read (no marker file yet):
    then every delivery row is missing, so the first case judged fails and any rerun of it
    passes. A stand-in for a system whose outcome differs between runs of one schedule."""
    snapshot = _REF.read_ledger(engine)
    marker = Path(os.environ[FLAKY_MARKER_ENV])
    if marker.exists():
        return snapshot
    marker.write_text("read once\n")
    return replace(snapshot, deliveries=())


DIES = _on_reference("DIES", "raises at start", _dies)
HANGS = _on_reference("HANGS", "never returns", _hangs)
LOSES = _on_reference("LOSES", "commits, never delivers", _loses_everything)


#: a boundary FICKLE declares besides the reference's
FICKLE_POINT = "fickle_point"
#: env var naming a marker file: FICKLE's first incarnation creates it
FICKLE_MARKER_ENV = "CH_TEST_FICKLE_MARKER"


def _fickle(config: WorkerConfig) -> None:
    """Reaches ``fickle_point`` twice in its campaign's first incarnation, once ever after:
    a sweep plans ``fickle_point#2`` from the dry run, and that crash can never land."""
    from pathlib import Path

    from harness import boundary

    marker = Path(os.environ[FICKLE_MARKER_ENV])
    first = not marker.exists()
    marker.touch()
    boundary(FICKLE_POINT)
    if first:
        boundary(FICKLE_POINT)
    _REF.main(config)


FICKLE = _on_reference(
    "FICKLE",
    "reaches one boundary less often after its first incarnation",
    _fickle,
    boundaries=(*_REF.boundaries, FICKLE_POINT),
)


FLAKY = System(
    name="tests._systems:FLAKY",
    description="the reference, whose first ledger read loses every delivery row",
    main=_REF.main,
    prepare=_REF.prepare,
    read_ledger=_reads_wrong_once,
)


#: env var: seconds every SLOW_START incarnation spends starting before it looks at the queue
SLOW_START_ENV = "CH_TEST_SLOW_START_S"


def _slow_start(config: WorkerConfig) -> None:
    """The reference on a loaded machine: each incarnation takes a while to get going (as
    under a busy CI runner), the same for every worker, before it makes its first claim."""
    import time

    time.sleep(float(os.environ[SLOW_START_ENV]))
    _REF.main(config)


SLOW_START = _on_reference(
    "SLOW_START", "the reference, slow to start each incarnation", _slow_start
)


#: env var: a file where PRINTS_ENV writes the provider secret it was given (for the test)
SECRET_FILE_ENV = "CH_TEST_SECRET_FILE"


def _prints_env(config: WorkerConfig) -> None:
    """A careless worker: dumps its whole environment (the provider credential with it) to
    stderr, then dies. The harness must keep that stderr without the secret."""
    import sys

    Path(os.environ[SECRET_FILE_ENV]).write_text(config.credential_secret)
    for key, value in sorted(os.environ.items()):
        print(f"{key}={value}", file=sys.stderr)
    raise RuntimeError(f"giving up; my credential was {config.credential_secret}")


PRINTS_ENV = _on_reference(
    "PRINTS_ENV", "prints its environment, secret included, and dies", _prints_env
)


#: env var naming a marker file: HANGS_LATER's first incarnation creates it
HANGS_LATER_MARKER_ENV = "CH_TEST_HANGS_LATER_MARKER"


def _hangs_later(config: WorkerConfig) -> None:
    """The reference for its first incarnation ever; every later one hangs (announcing it on
    ``CH_TEST_READY_FIFO``): a campaign that finishes a case, then stops in the next."""
    marker = Path(os.environ[HANGS_LATER_MARKER_ENV])
    if marker.exists():
        _hangs(config)
    marker.touch()
    _REF.main(config)


HANGS_LATER = _on_reference("HANGS_LATER", "the reference once, then hangs", _hangs_later)


def _quiet_exit(config: WorkerConfig) -> None:
    """The reference, whose events pipe closes a while before its process ends (as when a
    library closes inherited descriptors, or exit takes its time): the end of the pipe is
    not the end of the worker, and neither is proof that it went silent."""
    import time

    from harness.engine.process import _boundary

    _REF.main(config)
    tracer = _boundary._tracer
    if tracer is not None and tracer.events_fd is not None:
        os.close(tracer.events_fd)
        tracer.events_fd = None
    time.sleep(0.4)  # the gap between the pipe's end and the process's, made wide


QUIET_EXIT = _on_reference(
    "QUIET_EXIT", "the reference, closing its events pipe before it exits", _quiet_exit
)


def _hangs_with_pool(config: WorkerConfig) -> None:
    """Forks a pool child (which has no death signal of its own), then both hang: the child
    says it is ready, so a test that hears it knows both exist."""
    if os.fork() == 0:
        os.setsid()  # its own session and group: only a kill aimed at it (or its cgroup) lands
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        _hangs(config)
    os.environ.pop("CH_TEST_READY_FIFO", None)  # only the child says ready
    _hangs(config)


HANGS_WITH_POOL = replace(HANGS, name="tests._systems:HANGS_WITH_POOL", main=_hangs_with_pool)

#: env var naming a file: each daemon a DAEMONISES worker leaves appends "pid start_time"
DAEMON_FILE_ENV = "CH_TEST_DAEMON_FILE"


def _start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


def _daemonise(config: WorkerConfig) -> None:
    """Leave a daemon the classic way (fork, ``setsid``, fork, the middle one exits): it
    ignores the polite signals, records itself in ``CH_TEST_DAEMON_FILE`` and sleeps forever.
    Returns once the daemon is recorded."""
    ready_r, ready_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            me = os.getpid()
            with open(os.environ[DAEMON_FILE_ENV], "a") as f:
                f.write(f"{me} {_start_time(me)}\n")
            os.write(ready_w, b"ready")
            while True:
                signal.pause()
        os._exit(0)
    os.close(ready_w)
    os.waitpid(middle, 0)
    os.read(ready_r, 5)  # the daemon is recorded (or gone, and the test will say so)
    os.close(ready_r)


def _leaves_a_daemon(config: WorkerConfig) -> None:
    """The reference, after leaving a daemon behind: a straggler in every case it runs."""
    _daemonise(config)
    _REF.main(config)


def _hangs_with_daemon(config: WorkerConfig) -> None:
    """Leaves a daemon, then hangs (saying so on ``CH_TEST_READY_FIFO``)."""
    _daemonise(config)
    _hangs(config)


LEAVES_DAEMON = _on_reference("LEAVES_DAEMON", "the reference, leaving a daemon", _leaves_a_daemon)
HANGS_WITH_DAEMON = replace(HANGS, name="tests._systems:HANGS_WITH_DAEMON", main=_hangs_with_daemon)

#: env var naming a marker file: HANGS_ONCE's first incarnation creates it
HANGS_ONCE_MARKER_ENV = "CH_TEST_HANGS_ONCE_MARKER"


def _hangs_once(config: WorkerConfig) -> None:
    """Hangs in its first incarnation ever (announcing it on ``CH_TEST_READY_FIFO``), the
    reference in every later one: a case the test can act in, then cases that can pass."""
    marker = Path(os.environ[HANGS_ONCE_MARKER_ENV])
    if not marker.exists():
        marker.touch()
        _hangs(config)
    _REF.main(config)


HANGS_ONCE = _on_reference("HANGS_ONCE", "hangs once, then the reference", _hangs_once)

#: env var: a file where RESETS_EPOCH writes what it found and did (for the test)
HOSTILE_REPORT_ENV = "CH_TEST_HOSTILE_REPORT"
#: env var: where RESETS_EPOCH looks for an admin token: ``environ`` (every process's
#: environment it can read, its own included, and its own credential), plus ``memory`` (the
#: admin client a forked worker inherits from the harness); ``logfile``: instead of resetting,
#: it deletes its second copies from the provider's log file (open in the provider's /proc fd)
HOSTILE_SOURCES_ENV = "CH_TEST_HOSTILE_SOURCES"
#: env var: ``0`` makes RESETS_EPOCH send each message once (it only resets the provider)
HOSTILE_TWICE_ENV = "CH_TEST_HOSTILE_TWICE"


#: the admin clients RESETS_EPOCH found in its memory (with or without a token)
_FOUND_CLIENTS: list[str] = []


def _token_candidates(config: WorkerConfig, sources: set[str]) -> list[tuple[str, str]]:
    """``(where, token)`` for everything that might open the provider's admin API."""
    from fake_providers._credentials import ADMIN_TOKEN_ENV

    found: list[tuple[str, str]] = []
    if "environ" in sources:
        siblings = []  # the provider is a child of the harness process, as this worker is
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"\nPPid:\t{os.getppid()}\n" in status:
                siblings.append((entry.name, environ))
        prefix = f"{ADMIN_TOKEN_ENV}=".encode()
        for pid, environ in siblings:
            for item in environ.split(b"\0"):
                if item.startswith(prefix) and len(item) > len(prefix):
                    found.append((f"/proc/{pid}/environ", item[len(prefix) :].decode()))
        own = Path("/proc/self/environ").read_bytes().split(b"\0")
        for item in own:
            name, _, value = item.decode(errors="replace").partition("=")
            if len(value) >= 16:
                found.append((f"own environ {name}", value))
        found += [(f"own os.environ {k}", v) for k, v in os.environ.items() if len(v) >= 16]
        found.append(("own credential", config.credential_secret))
    if "memory" in sources:
        import gc

        from fake_providers import AdminClient

        for obj in gc.get_objects():
            if isinstance(obj, AdminClient):
                _FOUND_CLIENTS.append(repr(obj))
                token = obj._session.headers.get("X-Admin-Token")
                if isinstance(token, str | bytes) and token:
                    found.append(("inherited AdminClient", str(token)))
    return found


def _resets_epoch(config: WorkerConfig) -> None:
    """A hostile worker: sends every message twice (a second key, so the provider counts two
    effects), then looks for the provider's admin token wherever it can read one and resets
    the provider's epoch; in the new epoch it sends each message once more, so the provider's
    *current* epoch shows exactly one effect per delivery. A harness that judges the current
    epoch instead of the case's passes it."""
    import json

    import requests

    from harness.reference.adapters import make_adapter

    class TwiceSender(ReferenceWorker):
        sent: ClassVar[list[Any]] = []

        def attempt(self, claim: Any) -> None:
            if os.environ.get(HOSTILE_TWICE_ENV, "1") == "1":
                self.adapter_for(claim).send(
                    key=f"{claim.idempotency_key}-again",
                    destination=claim.destination,
                    run_id=claim.run_id,
                    delivery_id=claim.delivery_id,
                    body=claim.body,
                    recognizer=claim.recognizer,
                )
            self.sent.append(claim)
            super().attempt(claim)

    worker = TwiceSender(config)
    worker.run()
    sources = set(os.environ.get(HOSTILE_SOURCES_ENV, "environ").split(","))
    base = config.provider_url.split("/epoch/", 1)[0]
    report: dict[str, Any] = {"sent_twice": len(worker.sent), "tried": [], "reset_to": None}
    candidates = _token_candidates(config, sources)
    report["found_clients"] = len(_FOUND_CLIENTS)
    for where, token in candidates:
        answer = requests.post(f"{base}/_admin/reset", headers={"X-Admin-Token": token}, timeout=10)
        report["tried"].append([where, answer.status_code])
        if answer.status_code == 200:
            report["reset_to"] = epoch = int(answer.json()["epoch"])
            again = make_adapter(replace(config, provider_url=f"{base}/epoch/{epoch}"))
            for claim in worker.sent:
                again.send(
                    key=claim.idempotency_key,
                    destination=claim.destination,
                    run_id=claim.run_id,
                    delivery_id=claim.delivery_id,
                    body=claim.body,
                    recognizer=claim.recognizer,
                )
            break
    if "logfile" in sources:
        report["deleted"] = _delete_second_copies()
    Path(os.environ[HOSTILE_REPORT_ENV]).write_text(json.dumps(report))


def _delete_second_copies() -> int:
    """Delete every ``-again`` record from the provider's log file, found among the open
    files of a sibling process (the provider the harness started: forked, it has no argv
    of its own, but its open log is listed in /proc/<pid>/fd); return how many went."""
    import sqlite3

    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            if f"\nPPid:\t{os.getppid()}\n" not in status:
                continue
            opened = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        for log in opened:
            if Path(log).name.startswith("provider-effects") and log.endswith(".sqlite"):
                with sqlite3.connect(log, timeout=30) as conn:
                    cursor = conn.execute(
                        "DELETE FROM effects WHERE idempotency_key LIKE '%-again'"
                    )
                    return cursor.rowcount
    return 0


RESETS_EPOCH = _on_reference(
    "RESETS_EPOCH",
    "sends each message twice, then resets the provider's epoch with any token it finds",
    _resets_epoch,
)
