"""The campaign's own cgroup, which every worker's cgroup sits under, and its guard.

Made once per process that starts workers, at its first worker, after sweeping what
killed runs left; removed by the process that made it. The guard is a separate process
that kills the whole cgroup if the harness dies, however (SIGKILL included): a worker dies
with the harness by its death signal, but its own children (a pool, a work-horse) have
none. Here because the cgroup and its guard are made, found and ended together.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from harness.engine.process import _keeper, _tree
from harness.engine.process._child import HARNESS_PIPE_ENDS
from harness.engine.store import _secrets

#: set to ``walk`` to find worker trees by walking /proc even where cgroups are available
TREE_MODE_ENV = "CRASH_HARNESS_TREE"
#: a harness's cgroup is named this plus its pid (so a later harness can sweep stale ones)
CGROUP_PREFIX = "crash-harness-"

#: a process that outlives the harness by design: it waits for the harness's end of a pipe to
#: close (however the harness died, SIGKILL included) and then kills the campaign's cgroup.
#: Workers die with the harness by their death signal, but a worker's own children (a pool,
#: a work-horse) have none; without this they lived on until the next run swept the cgroup.
_GUARD = """
import os, sys, time
while os.read(0, 4096):
    pass
top = sys.argv[1]
try:
    with open(os.path.join(top, "cgroup.kill"), "w") as f:
        f.write("1")
except OSError:
    sys.exit(0)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    dirs = [d for d, _, _ in os.walk(top)]
    for d in reversed(dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass
    if not os.path.isdir(top):
        break
    time.sleep(0.05)
"""


class CampaignCgroup:
    """The campaign's cgroup (made at the first ``path``) and its guard; ``remove`` ends
    both, in the process that made them only."""

    def __init__(self) -> None:
        self._path: str | None = None
        self._owner = os.getpid()
        self._checked = False
        self.guard: subprocess.Popen[bytes] | None = None

    def path(self) -> str | None:
        """The campaign's cgroup, made (with its guard) at the first call; None when each
        worker's tree is found by walking /proc instead (no cgroup v2 here, or
        ``TREE_MODE_ENV`` says ``walk``)."""
        if not self._checked:
            self._checked = True
            _keeper.sweep_stale()  # what the keepers of a killed run (walk mode) still hold
            if os.environ.get(TREE_MODE_ENV, "") != "walk":
                base = _tree.cgroup2_base()
                if base is not None:
                    _tree.sweep_stale(base, CGROUP_PREFIX)
                    self._owner = os.getpid()
                    self._path = _tree.make_cgroup(base, f"{CGROUP_PREFIX}{os.getpid()}")
                    if self._path is not None:
                        self.guard = _start_guard(self._path)
        return self._path

    def remove(self) -> None:
        """Remove the cgroup and stop its guard (a forked job process inherits this object;
        only the creator removes the directory)."""
        if self._path is not None and self._owner == os.getpid():
            _tree.remove_cgroup(self._path)
            _stop_guard(self.guard)
            self.guard = None


def _start_guard(cgroup: str) -> subprocess.Popen[bytes] | None:
    try:
        # -I -S: no site, no user paths, no .pth files to run: the guard needs only os, sys
        # and time, and starts in a third of the time. A new interpreter, not a fork: it
        # outlives the harness, and a fork would keep the harness's memory for that long.
        guard = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD, cgroup],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the harness's group leaves it to its work
            env=_secrets.without_provider_secrets(os.environ),  # workers can read its environ
        )
    except OSError:
        return None
    assert guard.stdin is not None
    HARNESS_PIPE_ENDS.add(guard.stdin.fileno())
    return guard


def _stop_guard(guard: subprocess.Popen[bytes] | None) -> None:
    if guard is None or guard.stdin is None:
        return
    HARNESS_PIPE_ENDS.discard(guard.stdin.fileno())
    guard.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        guard.wait(timeout=15)
