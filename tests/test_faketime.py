"""What ``[worker] fake_time`` moves, measured in a real child process under the clock preload
(``harness/engine/process/_fake_clock.c``).

The child prints its readings on request; the test moves the offset file between requests,
as the harness does while a worker runs.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.engine.process import _faketime
from harness.errors import BadInputError
from tests._services import needs_fake_clock

#: answers one line per line read on stdin: its clocks, and how long a 0.2 s wait and a
#: 0.1 s sleep took (a sleep failed with EINVAL beside libfaketime 0.9.10)
CHILD = """
import datetime, json, sys, threading, time
for line in sys.stdin:
    began = time.perf_counter()
    threading.Event().wait(0.2)
    time.sleep(0.1)
    waited = time.perf_counter() - began
    print(json.dumps({
        "time": time.time(),
        "datetime": datetime.datetime.now().timestamp(),
        "monotonic": time.monotonic(),
        "waited": waited,
    }), flush=True)
"""


@needs_fake_clock
def test_a_child_under_fake_time_follows_the_offset_file_while_it_runs(tmp_path: Path) -> None:
    offset = tmp_path / _faketime.OFFSET_FILE
    _faketime.write_offset(offset, 0)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**os.environ, **_faketime.environment(str(offset))},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None

    def ask() -> dict[str, float]:
        assert child.stdin is not None
        assert child.stdout is not None
        sent, sent_mono = time.time(), time.monotonic()
        child.stdin.write("\n")
        child.stdin.flush()
        reading: dict[str, float] = json.loads(child.stdout.readline())
        # the child read its clocks between these (orderings, not durations: load only
        # widens the bracket)
        reading.update(sent=sent, real=time.time(), sent_mono=sent_mono, mono=time.monotonic())
        return reading

    try:
        before = ask()
        _faketime.write_offset(offset, 3600)
        after = ask()
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    slack = 1.0  # the fake clock's granularity (whole seconds at worst), not a duration
    assert before["sent"] - slack <= before["time"] <= before["real"] + slack, before
    # wall time (time.time, datetime.now) is an hour ahead as soon as the file says so
    for clock in ("time", "datetime"):
        assert after["sent"] + 3600 - slack <= after[clock] <= after["real"] + 3600 + slack, after
    # monotonic is left alone (CLOCK_MONOTONIC is the machine's, so the child's reading lies
    # between ours), so timed waits last what they say: a faked one made every Event.wait
    # last as long as the offset
    for reading in (before, after):
        assert reading["sent_mono"] <= reading["monotonic"] <= reading["mono"], reading
    assert after["waited"] > 0.29, after  # waited (a sleep failed with EINVAL returned at once)


#: threads reading the wall clock while the main thread forks children that read it too;
#: each child exits 0 once it has read it a thousand times. libfaketime's MT build hung
#: such a child in its lock (an RQ work-horse), its plain build killed the parent by SIGSEGV
FORKS_BESIDE_THREADS = """
import os, sys, threading, time
done = threading.Event()
def spin():
    while not done.is_set():
        time.time()
threads = [threading.Thread(target=spin) for _ in range(4)]
for t in threads:
    t.start()
ahead = 0
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        for _ in range(1000):
            time.time()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    ahead += time.time() > float(sys.argv[2])
done.set()
for t in threads:
    t.join()
print(ahead)
"""


@needs_fake_clock
def test_forks_beside_threads_reading_the_moved_clock_neither_hang_nor_crash(
    tmp_path: Path,
) -> None:
    """The case that hung or killed a worker under libfaketime, its offset moving while it
    runs: every fork returns, every child exits 0, and the parent reads the moved clock."""
    offset = tmp_path / _faketime.OFFSET_FILE
    _faketime.write_offset(offset, 0)
    real = time.time()
    child = subprocess.Popen(
        [sys.executable, "-c", FORKS_BESIDE_THREADS, "300", str(real + 1800)],
        env={**os.environ, **_faketime.environment(str(offset))},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for step in range(1, 200):  # the harness moving the clock while the worker runs
        _faketime.write_offset(offset, 3600 + step)
    try:
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert int(out) > 0, "the parent never read the moved clock"
    assert _faketime.read_offset(offset) == 3600 + 199


#: waits with an absolute deadline on the wall clock, a fifth of a second after its
#: (moved) reading, through libc as a C library would make them; prints the error numbers
REALTIME_DEADLINES = """
import ctypes, errno, time
libc = ctypes.CDLL(None, use_errno=True)
class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
def deadline():
    at = time.time() + 0.2
    return Timespec(int(at), int((at % 1) * 1e9))
sem = ctypes.create_string_buffer(64)
libc.sem_init(sem, 0, 0)
got = [libc.sem_timedwait(sem, ctypes.byref(deadline())), ctypes.get_errno()]
cond, mutex = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)
libc.pthread_cond_init(cond, None)
libc.pthread_mutex_init(mutex, None)
libc.pthread_mutex_lock(mutex)
got.append(libc.pthread_cond_timedwait(cond, mutex, ctypes.byref(deadline())))
print(got == [-1, errno.ETIMEDOUT, errno.ETIMEDOUT], got)
"""


@needs_fake_clock
def test_a_wait_until_a_wall_clock_deadline_ends_at_the_moved_deadline(tmp_path: Path) -> None:
    """A deadline computed from the moved clock, an hour ahead, is a fifth of a second away:
    the wait ends then, not an hour later (the test's timeout would end it first)."""
    offset = tmp_path / _faketime.OFFSET_FILE
    _faketime.write_offset(offset, 3600)
    done = subprocess.run(
        [sys.executable, "-c", REALTIME_DEADLINES],
        env={**os.environ, **_faketime.environment(str(offset))},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.startswith("True"), done.stdout + done.stderr


def test_a_reader_never_sees_half_an_offset(tmp_path: Path) -> None:
    """The file as the preload reads it: an even sequence around the value means the value
    is whole; a writer killed between its writes leaves the sequence odd, and the next write
    makes it even again."""
    offset = tmp_path / _faketime.OFFSET_FILE
    _faketime.write_offset(offset, 12.5)
    sequence, value = struct.unpack("<qq", offset.read_bytes())
    assert (sequence % 2, value) == (0, 12_500_000_000)
    offset.write_bytes(struct.pack("<qq", sequence + 1, 7))  # a writer killed mid-write
    _faketime.write_offset(offset, 3)
    again, value = struct.unpack("<qq", offset.read_bytes())
    assert again % 2 == 0
    assert again > sequence
    assert value == 3_000_000_000
    assert _faketime.read_offset(offset) == 3.0


def test_a_missing_compiler_is_named_with_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built yet
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(_faketime.shutil, "which", lambda _name: None)
    with pytest.raises(BadInputError, match="apt-get install gcc"):
        _faketime.preload()
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(BadInputError, match="no-such-cc"):
        _faketime.preload()
