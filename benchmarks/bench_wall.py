"""What the wall costs per incarnation: one crash-restart cycle (bench_cycle.py's: fork a
worker that commits a row to SQLite and POSTs one message, SIGKILL it at a boundary, reap it,
classify it) with each worker behind the wall (its own PID and mount namespaces under an
init, ``harness.engine.process._wall``) and with ``CRASH_HARNESS_ISOLATION=off``, interleaved in one
run, against the bare fork+commit+POST+kill a person would script. Prints medians and the
ratios; the goal is the cycle's own (<= 1.3 of bare), with the wall on. On a loaded machine
the wall's extra hand-offs (harness -> init -> worker) each wait for a CPU, so it also prints
the CPU time per incarnation (harness and every process it reaped), which load does not move.
"""

from __future__ import annotations

import os
import resource
import secrets
import sqlite3
import statistics
import tempfile
from pathlib import Path

from _goals import record
from _machine import births, tree_setup
from _quick import pick
from bench_cycle import bare_cycle, harness_cycle

from fake_providers import ProviderProcess
from harness.engine.process import _wall
from harness.engine.process.supervisor import Supervisor

CYCLES = pick(60, 4)


def _cpu_ms() -> float:
    self_, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return (self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime) * 1e3


def _cpu_per_cycle(sup: Supervisor, db: Path, url: str, secret: str, wall: str) -> float:
    """CPU ms per crash-restart cycle (median of blocks of cycles), every process reaped."""
    os.environ[_wall.ISOLATION_ENV] = wall
    root = db.parent
    per: list[float] = []
    for block in range(pick(8, 1)):
        start = _cpu_ms()
        for n in range(BLOCK):
            trace = root / f"cpu-{wall}-{block}-{n}.jsonl"
            # a fresh worker name per cycle (hits are counted per name)
            number = 10_000 + 1_000 * (wall == "on") + 100 * block + n
            harness_cycle(sup, db, url, secret, number, trace)
        sup._reap_ended(block=True)  # the last inits' CPU counts only once they are reaped
        per.append((_cpu_ms() - start) / BLOCK)
    return statistics.median(per)


BLOCK = pick(10, 2)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "bench.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE t(n INTEGER)")
        secret = secrets.token_urlsafe(16)
        times: dict[str, list[float]] = {"bare": [], "on": [], "off": []}
        with (
            ProviderProcess.start(
                log_path=root / "effects.sqlite", credentials={"bench": (secret, ["*"])}
            ) as provider,
            Supervisor(workdir=root) as sup,
        ):
            for n in range(CYCLES):  # interleaved, so drift hits every side alike
                times["bare"].append(bare_cycle(db, provider.url, secret, 3 * n))
                for k, wall in enumerate(("on", "off"), start=1):
                    os.environ[_wall.ISOLATION_ENV] = wall
                    trace = root / f"trace-{wall}-{n}.jsonl"
                    times[wall].append(
                        harness_cycle(sup, db, provider.url, secret, 3 * n + k, trace)
                    )
            cpu = {
                wall: _cpu_per_cycle(sup, db, provider.url, secret, wall) for wall in ("on", "off")
            }
            os.environ.pop(_wall.ISOLATION_ENV)
            walled = _wall.describe()
    b, on, off = (statistics.median(times[k]) * 1e3 for k in ("bare", "on", "off"))
    print(f"cycles per side:               {CYCLES}")
    print(f"worker trees:                  {tree_setup()}; {births(sup)}")
    print(f"the wall:                      {walled}")
    print(f"bare fork+commit+POST+kill:    median {b:7.2f} ms")
    print(f"harness cycle, wall off:       median {off:7.2f} ms")
    print(f"harness cycle, wall on:        median {on:7.2f} ms")
    print(f"ratio wall on/off:             {on / off:.2f}  (+{on - off:.2f} ms per incarnation)")
    print(f"ratio harness/bare, wall off:  {off / b:.2f}")
    print(f"ratio harness/bare, wall on:   {on / b:.2f}  (goal <= 1.3)")
    print(
        f"CPU per incarnation:           median wall off {cpu['off']:.2f} ms,"
        f" on {cpu['on']:.2f} ms (+{cpu['on'] - cpu['off']:.2f} ms)"
    )
    record("crash-restart cycle behind the wall / bare", on / b, goal=1.3, at_most=True)


if __name__ == "__main__":
    main()
