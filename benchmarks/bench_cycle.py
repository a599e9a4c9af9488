"""One crash-restart cycle of the harness against the same cycle written by hand (goal <= 1.3).

Both sides do the same work per cycle against the same running fake provider: fork a
worker, which commits a row to SQLite (WAL) and POSTs one message, then is SIGKILLed and
reaped. The hand-written side is the minimum a person would script; the harness side goes
through the Supervisor (process group, death signal, output files, trace line, boundary
record and outcome classification). Prints medians and the ratio, measured in one run.
"""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import requests
from _goals import record
from _machine import births, tree_setup
from _quick import pick

from fake_providers import ProviderProcess
from harness import boundary
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import OutcomeKind, Supervisor

CYCLES = pick(60, 4)


def _work(db: Path, url: str, secret: str, n: int) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t(n) VALUES (?)", (n,))
    conn.execute("COMMIT")
    requests.post(
        f"{url}/v1/messages",
        json={
            "destination": "d",
            "run_id": f"r{n}",
            "delivery_id": f"x{n}",
            "body": "b",
            "recognizer": "c",
        },
        headers={"Idempotency-Key": f"k{os.getpid()}-{n}", "Authorization": f"Bearer {secret}"},
        timeout=10,
    )


def bare_cycle(db: Path, url: str, secret: str, n: int) -> float:
    start = time.perf_counter()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _work(db, url, secret, n)
        os.write(w, b"x")
        signal.pause()
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # the child has done its work; now kill it as a crash would
    os.close(r)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return time.perf_counter() - start


def harness_cycle(sup: Supervisor, db: Path, url: str, secret: str, n: int, trace: Path) -> float:
    def target() -> None:
        _work(db, url, secret, n)
        boundary("after_provider_accept")

    start = time.perf_counter()
    # a fresh name per cycle: hits are counted per worker name, as a restart is a new worker
    w = sup.start(f"w{n}", target, trace_path=trace, arms=[Arm("after_provider_accept", 1)])
    out = sup.wait(w, timeout_s=30, trace_path=trace)
    elapsed = time.perf_counter() - start
    assert out.kind is OutcomeKind.CRASHED_AS_PLANNED, out
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "bench.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE t(n INTEGER)")
        secret = secrets.token_urlsafe(16)
        with (
            ProviderProcess.start(
                log_path=root / "effects.sqlite", credentials={"bench": (secret, ["*"])}
            ) as provider,
            Supervisor(workdir=root) as sup,
        ):
            bare: list[float] = []
            harnessed: list[float] = []
            for n in range(CYCLES):  # interleaved, so drift hits both sides alike
                bare.append(bare_cycle(db, provider.url, secret, 2 * n))
                trace = root / f"trace-{n}.jsonl"
                harnessed.append(harness_cycle(sup, db, provider.url, secret, 2 * n + 1, trace))
    b = statistics.median(bare) * 1e3
    h = statistics.median(harnessed) * 1e3
    print(f"cycles per side:             {CYCLES}")
    print(f"worker trees:                {tree_setup()}; {births(sup)}")
    print(f"bare fork+commit+POST+kill:  median {b:7.2f} ms")
    print(f"harness crash-restart cycle: median {h:7.2f} ms")
    print(f"ratio harness/bare:          {h / b:.2f}  (goal <= 1.3)")
    record("crash-restart cycle / bare fork+commit+POST+kill", h / b, goal=1.3, at_most=True)


if __name__ == "__main__":
    main()
