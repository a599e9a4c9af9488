"""The wall clock of a third-party worker, moved by the harness through libfaketime.

A task queue's recovery runs on timers the harness cannot reach: Kombu's visibility timeout,
RQ's heartbeat TTL. Rather than wait real minutes, the worker's process tree (and the settle
hooks) run with libfaketime preloaded, reading their offset from a file the harness rewrites
whenever the case's clock moves. The offset is what the case clock has moved (a restart gap,
a ``clock_jump``), so a worker's ``time.time()`` is wall time plus that; a broker server the
harness did not start keeps real time (see docs/own-worker.md, "Time the harness moves").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness.errors import BadInputError

#: set to the path of ``libfaketime.so.1`` (or its MT variant) when it is somewhere else
LIBRARY_ENV = "CRASH_HARNESS_LIBFAKETIME"
#: where Debian, Ubuntu and a source build put it; the MT build copes with threaded workers
_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)
#: the offset file in each case's directory
OFFSET_FILE = "faketime.offset"


def library() -> str:
    """The libfaketime to preload; a clear error naming the package when there is none."""
    given = os.environ.get(LIBRARY_ENV)
    if given:
        if not Path(given).is_file():
            raise BadInputError(f"{LIBRARY_ENV}={given!r}: no such file")
        return given
    for candidate in _CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    raise BadInputError(
        "[worker] fake_time = true needs libfaketime: install it (Debian/Ubuntu: "
        f"apt-get install faketime) or point {LIBRARY_ENV} at libfaketimeMT.so.1"
    )


def shim() -> str:
    """The small preload that keeps monotonic sleeps working beside libfaketime
    (``_faketime_shim.c``), built on first use into the user's cache with the C compiler
    (``CC``, else ``cc``) and reused while its source is unchanged."""
    source = Path(__file__).with_name("_faketime_shim.c")
    code = source.read_bytes()
    digest = hashlib.sha256(code).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crash-harness"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: the system's temporary directory, per user
        cache = Path(tempfile.gettempdir()) / f"crash-harness-cache-{os.getuid()}"
        cache.mkdir(mode=0o700, exist_ok=True)
    built = cache / f"faketime-shim-{digest}.so"
    if built.is_file():
        return str(built)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BadInputError(
            "[worker] fake_time = true needs a C compiler to build its 25-line shim beside "
            "libfaketime (harness/engine/_faketime_shim.c): install gcc, or set CC"
        )
    tmp = built.with_name(f"{built.name}.{os.getpid()}.tmp")
    done = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(source), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BadInputError(
            f"[worker] fake_time: building the libfaketime shim with {compiler} failed: "
            f"{(done.stdout + done.stderr).strip()[-500:]}"
        )
    os.replace(tmp, built)  # two harnesses building at once both end with a whole file
    return str(built)


def forget(pid: int) -> None:
    """Remove what libfaketime left in /dev/shm for a process tree whose first process was
    ``pid``: it removes them itself on a normal exit, never on SIGKILL."""
    for name in (f"sem.faketime_sem_{pid}", f"faketime_shm_{pid}"):
        with contextlib.suppress(OSError):
            os.unlink(f"/dev/shm/{name}")


def write_offset(path: Path, seconds: float) -> None:
    """Set the fake clock to wall time plus ``seconds`` for every process reading ``path``.

    Written to a temporary file and renamed over, so a reader sees the old offset or the new
    one, never half a line."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"+{max(0.0, seconds):.3f}\n")
    os.replace(tmp, path)


def environment(offset_file: str) -> dict[str, str]:
    """What a process needs in its environment to tell the time by ``offset_file``."""
    lib = library()
    ours = f"{shim()}:{lib}"  # the shim first, so its clock_nanosleep wins
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        "LD_PRELOAD": f"{ours}:{preload}" if preload else ours,
        "FAKETIME_TIMESTAMP_FILE": offset_file,
        # read the file on every call: the harness moves the clock while the worker runs
        "FAKETIME_NO_CACHE": "1",
        # Python's timed lock waits take an absolute CLOCK_MONOTONIC deadline, which the
        # kernel measures on the real clock: a faked monotonic makes every Event.wait(1)
        # last as long as the offset (a redis-py pubsub thread join hung an RQ worker)
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
