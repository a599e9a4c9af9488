"""The wall clock of a third-party worker, moved by the harness through a preload of its own.

A task queue's recovery runs on timers the harness cannot reach: Kombu's visibility timeout,
RQ's heartbeat TTL. Rather than wait real minutes, the worker's process tree (and the settle
hooks) run with ``_fake_clock.c`` preloaded, reading their offset from a file the harness
rewrites whenever the case's clock moves. The offset is what the case clock has moved (a
restart gap, a ``clock_jump``), so a worker's ``time.time()`` is wall time plus that; a broker
server the harness did not start keeps real time (see docs/own-worker.md, "Time the harness
moves").

The harness preloaded libfaketime before. Debian's 0.9.10 build hung the child of a fork in
a threaded worker (its MT build's lock) or killed the worker by SIGSEGV (its plain build's
shared buffer, re-read from every thread): a verdict about the worker that was the clock's
doing. The preload reads one mapped number under a sequence counter instead (the C file says
how), so what it cannot do is hold a lock or allocate.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from harness.errors import BadInputError

#: the offset file in each case's directory
OFFSET_FILE = "clock.offset"
#: where the preload finds it
CLOCK_FILE_ENV = "CRASH_HARNESS_CLOCK_FILE"
#: the file: a sequence number (odd while a write is under way), the offset in nanoseconds
_LAYOUT = struct.Struct("<qq")


def preload() -> str:
    """The clock preload (``_fake_clock.c``), built on first use into the user's cache with
    the C compiler (``CC``, else ``cc``) and reused while its source is unchanged."""
    source = Path(__file__).with_name("_fake_clock.c")
    code = source.read_bytes()
    digest = hashlib.sha256(code).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crash-harness"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: the system's temporary directory, per user
        cache = Path(tempfile.gettempdir()) / f"crash-harness-cache-{os.getuid()}"
        cache.mkdir(mode=0o700, exist_ok=True)
    built = cache / f"fake-clock-{digest}.so"
    if built.is_file():
        return str(built)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise BadInputError(
            "[worker] fake_time = true needs a C compiler to build its clock preload "
            "(harness/engine/process/_fake_clock.c): install gcc (Debian: apt-get install "
            "gcc), or set CC"
        )
    tmp = built.with_name(f"{built.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(source), "-ldl"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise BadInputError(
            f"[worker] fake_time: cannot run the C compiler {compiler} (CC): {exc.strerror}"
        ) from None
    if done.returncode != 0:
        raise BadInputError(
            f"[worker] fake_time: building the clock preload with {compiler} failed: "
            f"{(done.stdout + done.stderr).strip()[-500:]}"
        )
    os.replace(tmp, built)  # two harnesses building at once both end with a whole file
    return str(built)


def write_offset(path: Path, seconds: float) -> None:
    """Set the fake clock to wall time plus ``seconds`` for every process that maps ``path``.

    The sequence number goes odd, the offset is written, the sequence goes even again: a
    reader that saw an odd number, or two different ones around its read, reads again, so it
    never sees half an offset. The harness is the only writer."""
    nanoseconds = round(max(0.0, seconds) * 1e9)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        current = os.pread(fd, _LAYOUT.size, 0)
        sequence = _LAYOUT.unpack(current)[0] if len(current) == _LAYOUT.size else 0
        sequence += sequence & 1  # even, whatever a killed writer left
        if len(current) < _LAYOUT.size:
            os.pwrite(fd, _LAYOUT.pack(sequence, 0), 0)
        os.pwrite(fd, struct.pack("<q", sequence + 1), 0)
        os.pwrite(fd, struct.pack("<q", nanoseconds), 8)
        os.pwrite(fd, struct.pack("<q", sequence + 2), 0)
    finally:
        os.close(fd)


def read_offset(path: Path) -> float:
    """The offset ``path`` holds, in seconds (what a preloaded worker adds to wall time)."""
    nanoseconds: int = _LAYOUT.unpack(path.read_bytes()[: _LAYOUT.size])[1]
    return nanoseconds / 1e9


def environment(offset_file: str) -> dict[str, str]:
    """What a process needs in its environment to tell the time by ``offset_file``."""
    theirs = os.environ.get("LD_PRELOAD", "")
    ours = preload()
    return {
        "LD_PRELOAD": f"{ours}:{theirs}" if theirs else ours,
        CLOCK_FILE_ENV: offset_file,
    }
