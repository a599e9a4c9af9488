"""A daemon worker for the lifecycle tests: it delivers what ``jobs()`` holds, then waits for
more forever, as a Celery worker does, until its stop signal.

``python -m tests._daemon MODE``, where MODE is

- ``correct``: post with the job's idempotency key, then mark it done; on SIGTERM exit 0;
- ``marks-first``: mark the job done, then post: a crash in between loses it;
- ``ignores-term``: ``correct``, but SIGTERM is ignored (the harness must SIGKILL it);
- ``pool``: each job runs in a forked child; when a child dies by a signal the parent exits 1
  (a supervisor that gives up), so the harness restarts it only under ``exits_after_crash``;
- ``visibility``: a job taken by an earlier incarnation is taken again only once its claim is
  600 s old on the wall clock (a broker's visibility timeout), so a restart finishes it soon
  only when the harness moves the worker's wall clock (``fake_time``).
- ``slow-start``: ``correct``, but it starts slowly (3 s, standing in for a heavy import)
  and puts its jobs in its own queue table first, so its probe (``tests._daemon:queued``)
  says "nothing pending" until it has started: a harness that counts its quiet window from
  the spawn stops it before it has done anything;
- ``gated``: ``correct``, but each job waits at a gate (a FIFO) that its probe
  (``tests._daemon:gated``) opens on its second look once the worker waits there; that
  look answers what it read before opening the gate ("pending"), once the job is done: the
  work finishes between the probe's reading and the harness's decision;
- ``spin``: once started, moves to one CPU (``starving_cpu``) at the lowest priority and
  needs ``SPIN_CPU_S`` seconds of CPU time before each send (a CPU-bound job): with a CPU
  hog on that CPU it is starved;
- ``stall``: moves like ``spin``, but then blocks forever before its first send (a worker
  that stalled: asleep, not waiting for CPU).

The settle probe is ``tests._daemon:pending`` (jobs not yet done, by this worker's table).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

import requests
from sqlalchemy import Engine, text

from harness import Job, WorkerConfig, boundary, jobs

#: a claim older than this on the worker's wall clock may be taken again
VISIBILITY_TIMEOUT_S = 600
#: the teardown hook appends the case's database to this file
TEARDOWN_LOG_ENV = "CH_TEST_TEARDOWN_LOG"
#: directory of the ``gated`` mode's FIFOs and markers
GATE_DIR_ENV = "CH_TEST_GATE_DIR"
#: how long ``slow-start`` takes to start (longer than the scenarios' quiet_s)
SLOW_START_S = 3.0
#: CPU seconds each ``spin`` job needs before its send
SPIN_CPU_S = 2.0
#: the probe's look, once the worker waits at the gate, that opens it: the first look is
#: the worker's first sign of life, so the second comes after a settle deadline of less
#: than the probe interval
GATE_OPENS_AT_LOOK = 2
_gate_looks: dict[str, int] = {}


def prepare(engine: Engine) -> None:
    with engine.begin() as c:
        c.execute(
            text("CREATE TABLE IF NOT EXISTS daemon_done (delivery_id VARCHAR(64) PRIMARY KEY)")
        )
        c.execute(
            text(
                "CREATE TABLE IF NOT EXISTS daemon_claim"
                " (delivery_id VARCHAR(64) PRIMARY KEY, claimed_at FLOAT)"
            )
        )
        c.execute(
            text("CREATE TABLE IF NOT EXISTS daemon_queue (delivery_id VARCHAR(64) PRIMARY KEY)")
        )


def pending(config: WorkerConfig) -> dict[str, int]:
    engine = config.db.engine()
    try:
        with engine.connect() as c:
            done = {r[0] for r in c.execute(text("SELECT delivery_id FROM daemon_done"))}
    finally:
        engine.dispose()
    return {"undone": sum(1 for j in jobs(config) if j.delivery_id not in done)}


def queued(config: WorkerConfig) -> dict[str, int]:
    """Jobs in the worker's own queue and not yet done (0 before it has enqueued any)."""
    engine = config.db.engine()
    try:
        with engine.connect() as c:
            n = c.execute(
                text(
                    "SELECT COUNT(*) FROM daemon_queue WHERE delivery_id NOT IN"
                    " (SELECT delivery_id FROM daemon_done)"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return {"queued": int(n)}


def _gate(config: WorkerConfig, name: str) -> str:
    return os.path.join(os.environ[GATE_DIR_ENV], f"{config.case_key}.{name}")


def gated(config: WorkerConfig) -> dict[str, int]:
    """The ``gated`` mode's probe. It knocks first (the worker goes to its gate only after a
    knock, so the probe's first answer is from before). Its answer changes when the worker
    waits at the gate (the worker's first sign of life); on its next look it opens the gate
    and answers what it read before, once the job is done."""
    with contextlib.suppress(OSError):  # ENXIO: nobody is listening for the knock yet
        os.close(os.open(_gate(config, "knock"), os.O_WRONLY | os.O_NONBLOCK))
    if not os.path.exists(_gate(config, "waiting")):
        _gate_looks.pop(config.case_key, None)
        return {**pending(config), "at_gate": 0}
    looks = _gate_looks[config.case_key] = _gate_looks.get(config.case_key, 0) + 1
    before = {**pending(config), "at_gate": 1}
    if looks != GATE_OPENS_AT_LOOK:
        return before
    done = os.open(_gate(config, "done"), os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.close(os.open(_gate(config, "gate"), os.O_WRONLY | os.O_NONBLOCK))  # opens it
        readable, _, _ = select.select([done], [], [], 60)
        if not readable:
            raise RuntimeError("the gated worker never said it was done")
    finally:
        os.close(done)
    return before  # read before the send: stale by the time it is answered


def _await_writer(name: str, config: WorkerConfig) -> None:
    """Block until some process opens (and closes) the FIFO ``name`` for writing."""
    fd = os.open(_gate(config, name), os.O_RDONLY | os.O_NONBLOCK)  # a reader from now
    try:
        if name == "gate":
            with open(_gate(config, "waiting"), "w"):
                pass
        select.select([fd], [], [])  # readable (hung up) once a writer came and went
    finally:
        os.close(fd)


def _wait_at_gate(config: WorkerConfig) -> None:
    """After the probe's next knock, wait at the gate until the probe opens it."""
    for name in ("knock", "gate", "done"):
        with contextlib.suppress(FileExistsError):
            os.mkfifo(_gate(config, name))
    _await_writer("knock", config)
    try:
        _await_writer("gate", config)
    finally:
        os.unlink(_gate(config, "waiting"))


def _say_done(config: WorkerConfig) -> None:
    fd = os.open(_gate(config, "done"), os.O_WRONLY)  # the probe holds the read end open
    os.write(fd, b"done\n")
    os.close(fd)


def starving_cpu() -> int:
    """The CPU the ``spin`` and ``stall`` modes move to (a test's CPU hog goes there too)."""
    return min(os.sched_getaffinity(0))


def _spin(seconds: float) -> None:
    """Burn ``seconds`` of this process's CPU time (not wall time)."""
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


def teardown(config: WorkerConfig) -> None:
    log = os.environ.get(TEARDOWN_LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{config.db.url}|{config.db.schema or ''}\n")


def _mark(engine: Engine, delivery_id: str) -> None:
    with engine.begin() as c:
        c.execute(
            text("INSERT INTO daemon_done (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"),
            {"d": delivery_id},
        )


def _claimable(engine: Engine, delivery_id: str) -> bool:
    """Claim the job unless an earlier incarnation's claim is still "visible"."""
    now = time.time()
    with engine.begin() as c:
        row = c.execute(
            text("SELECT claimed_at FROM daemon_claim WHERE delivery_id = :d"), {"d": delivery_id}
        ).first()
        if row is not None and now - row[0] < VISIBILITY_TIMEOUT_S:
            return False
        c.execute(text("DELETE FROM daemon_claim WHERE delivery_id = :d"), {"d": delivery_id})
        c.execute(
            text("INSERT INTO daemon_claim (delivery_id, claimed_at) VALUES (:d, :t)"),
            {"d": delivery_id, "t": now},
        )
    return True


def _post(job: Job) -> None:
    reply = requests.post(job.url, json=job.message, headers=dict(job.headers), timeout=5)
    reply.raise_for_status()


def _deliver(config: WorkerConfig, engine: Engine, mode: str) -> None:
    with engine.connect() as c:
        done = {r[0] for r in c.execute(text("SELECT delivery_id FROM daemon_done"))}
    for job in list(jobs(config)):
        if job.delivery_id in done:
            continue
        if mode == "visibility" and not _claimable(engine, job.delivery_id):
            continue
        if mode == "marks-first":
            _mark(engine, job.delivery_id)
        if mode == "pool":
            child = os.fork()
            if child == 0:
                boundary("job_started")
                _post(job)
                boundary("after_provider_accept")
                _mark(engine, job.delivery_id)
                os._exit(0)
            _, status = os.waitpid(child, 0)
            if os.WIFSIGNALED(status):
                print(f"pool child {child} died by signal {os.WTERMSIG(status)}", file=sys.stderr)
                sys.exit(1)
            continue
        if mode == "gated":  # before any boundary: the gate is its first sign of life
            _wait_at_gate(config)
        boundary("job_started")
        if mode in ("spin", "stall"):  # started: now behind anything else on one CPU
            os.sched_setaffinity(0, {starving_cpu()})
            os.nice(19)
        if mode == "spin":
            _spin(SPIN_CPU_S)
        if mode == "stall":
            signal.pause()  # asleep for good: not waiting for any CPU
        _post(job)
        boundary("after_provider_accept")
        _mark(engine, job.delivery_id)
        if mode == "gated":
            _say_done(config)


def _enqueue(config: WorkerConfig, engine: Engine) -> None:
    todo = list(jobs(config))  # outside the write transaction (SQLite locks at BEGIN)
    with engine.begin() as c:
        for job in todo:
            c.execute(
                text("INSERT INTO daemon_queue (delivery_id) VALUES (:d) ON CONFLICT DO NOTHING"),
                {"d": job.delivery_id},
            )


def main(mode: str) -> None:
    if mode == "ignores-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if mode == "slow-start":
        time.sleep(SLOW_START_S)  # stands in for a heavy import: nothing happens meanwhile
    config = WorkerConfig.from_env()
    engine = config.db.engine()
    if mode == "slow-start":
        _enqueue(config, engine)
    while True:  # a daemon: look for work now and then, forever
        _deliver(config, engine, mode)
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1])
