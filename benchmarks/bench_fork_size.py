"""Does the size of the process a worker is forked from matter? (the "zygote" question of #27)

A worker is a fork of the harness (~75 MB resident in an explore). A small pre-imported
process forking each worker instead (a zygote) pays only if a fork's cost grows with the
parent's size. This forks processes of three sizes (their heap is Python objects, as a
harness's is) and prints, as CPU ms medians (parent + child, from getrusage and wait4):

- a bare fork + SIGKILL + reap (page tables copied, then torn down);
- the same with the child doing one fixed piece of Python work first (allocations, json): the
  copy-on-write faults any live interpreter takes;
- the same with a full collection in the child, inherited objects unfrozen, then frozen
  (``gc.freeze``): what one collection of the parent's heap costs a worker (workers do not
  freeze: ``harness.engine.process._child.run`` says why);

and the cost of one copy-on-write fault against a zero-fill fault on this machine.

``python benchmarks/bench_fork_size.py [ROUNDS]`` (default 60 forks per figure).
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

from _quick import pick

SIZES_MB = (30, 75, 150)
KINDS = ("bare", "work", "collect", "collect-frozen")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _work(kind: str) -> None:
    data = [{"a": i, "b": str(i)} for i in range(3000)]
    json.dumps(data)
    if kind.startswith("collect"):
        gc.collect()


def _cpu_ms(ru: resource.struct_rusage) -> float:
    return (ru.ru_utime + ru.ru_stime) * 1000


def _one_size(mb: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    """kind -> (parent CPU ms, child CPU ms, child minor faults), medians."""
    heap = []
    while _rss_mb() < mb:  # dicts, strings and tuples: objects the collector tracks
        heap.append([{f"k{i}": str(i) * 3, "v": (i, i + 1.5)} for i in range(1000)])
    found: dict[str, tuple[float, float, float]] = {}
    for kind in KINDS:
        parent: list[float] = []
        child: list[float] = []
        faults: list[float] = []
        for _ in range(rounds):
            before = resource.getrusage(resource.RUSAGE_SELF)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                if kind.endswith("frozen"):
                    gc.freeze()
                if kind != "bare":
                    _work(kind)
                os.write(w, b"x")
                signal.pause()
            os.close(w)
            os.read(r, 1)
            os.close(r)
            after = resource.getrusage(resource.RUSAGE_SELF)
            os.kill(pid, signal.SIGKILL)
            _, _, ru = os.wait4(pid, 0)
            parent.append(_cpu_ms(after) - _cpu_ms(before))
            child.append(_cpu_ms(ru))
            faults.append(ru.ru_minflt)
        found[kind] = (
            statistics.median(parent),
            statistics.median(child),
            statistics.median(faults),
        )
    del heap
    return found


def _fault_cost(pages: int = 4000) -> tuple[float, float]:
    """(copy-on-write, zero-fill) microseconds per page fault, in a forked child."""
    buf = bytearray(pages * 2 * mmap.PAGESIZE)
    for i in range(0, len(buf), mmap.PAGESIZE):
        buf[i] = 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        start = time.perf_counter()
        for i in range(pages):
            buf[i * mmap.PAGESIZE] = 2
        cow = time.perf_counter() - start
        fresh = mmap.mmap(-1, pages * mmap.PAGESIZE)
        start = time.perf_counter()
        for i in range(pages):
            fresh[i * mmap.PAGESIZE] = 2
        zero = time.perf_counter() - start
        os.write(w, json.dumps([cow / pages * 1e6, zero / pages * 1e6]).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        cow_us, zero_us = json.loads(f.read())
    os.waitpid(pid, 0)
    return cow_us, zero_us


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else pick(60, 3)
    if len(sys.argv) > 2:  # one size, in a fresh process (so sizes do not add up)
        print(json.dumps(_one_size(int(sys.argv[2]), rounds)))
        return 0
    sizes = SIZES_MB if pick(1, 0) else SIZES_MB[:1]
    print(f"fork of a process of N MB resident + SIGKILL + reap, {rounds} forks per figure")
    print("CPU ms medians (parent + child), child's minor faults in brackets")
    print(f"  {'size':>6s}  " + "  ".join(f"{k:>20s}" for k in KINDS))
    for mb in sizes:
        out = subprocess.run(
            [sys.executable, __file__, str(rounds), str(mb)],
            capture_output=True,
            text=True,
            check=True,
        )
        found = json.loads(out.stdout)
        cells = [f"{p + c:8.2f} [{flt:7.0f}]" for p, c, flt in (found[k] for k in KINDS)]
        print(f"  {mb:4d}MB  " + "  ".join(f"{cell:>20s}" for cell in cells))
    cow_us, zero_us = _fault_cost()
    print(f"one page fault: copy-on-write {cow_us:.2f} us, zero-fill {zero_us:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
