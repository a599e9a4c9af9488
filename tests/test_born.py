"""Workers are born in their cgroup (clone3 CLONE_INTO_CGROUP), never moved there.

Each check runs in a fresh interpreter: the born-in-place fork is only taken while the
process has one thread, and a pytest process may have a watchdog thread of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.engine.process import _tree

pytestmark = pytest.mark.skipif(
    _tree.cgroup2_base() is None, reason="no cgroup v2 this process may create cgroups in"
)


def _run(code: str, tmp_path: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


_MAKE_CGROUP = """
import os, sys
from harness.engine.process import _born
from harness.engine.process import _tree
base = _tree.cgroup2_base()
top = _tree.make_cgroup(base, f"crash-harness-test-born-{os.getpid()}")
cg = _tree.make_cgroup(top, "w")
"""


def test_a_child_is_in_its_cgroup_at_its_first_instruction(tmp_path: Path) -> None:
    out = _run(
        _MAKE_CGROUP
        + """
r, w = os.pipe()
pid = _born.fork_into(cg)
if pid == 0:
    # nothing before this read: had the child been moved, it would not be there yet
    own = open("/proc/self/cgroup").read()
    os.write(w, own.encode())
    os._exit(0)
os.close(w)
own = os.read(r, 4096).decode()
_, status = os.waitpid(pid, 0)
os.rmdir(cg); os.rmdir(top)
print("pid", pid > 0, "exit", os.waitstatus_to_exitcode(status))
print("in", [ln for ln in own.splitlines() if ln.startswith("0::")][0].endswith("/w"))
""",
        tmp_path,
    )
    assert out.split() == ["pid", "True", "exit", "0", "in", "True"]


def test_with_a_second_thread_nothing_is_forked_and_the_caller_falls_back(
    tmp_path: Path,
) -> None:
    out = _run(
        _MAKE_CGROUP
        + """
import threading
stop = threading.Event()
t = threading.Thread(target=stop.wait)
t.start()
got = _born.fork_into(cg)
stop.set(); t.join()
# join returns once the thread's Python code is done; the kernel reaps the thread itself a
# moment later, and until then the process still has two
for _ in range(1_000_000):
    if _born.single_threaded():
        break
    os.sched_yield()
alone = _born.fork_into(cg)
if alone == 0:
    os._exit(0)
os.waitpid(alone, 0)
os.rmdir(cg); os.rmdir(top)
print(got, alone > 0)
""",
        tmp_path,
    )
    assert out.split() == ["None", "True"]


def test_the_supervisor_starts_workers_born_in_their_cgroup_and_kills_their_trees(
    tmp_path: Path,
) -> None:
    out = _run(
        """
import os, sys
from pathlib import Path
from harness import boundary
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import OutcomeKind, Supervisor
work = Path(sys.argv[1])

def target():
    with open(work / f"cg-{os.getpid()}", "w") as f:
        f.write(open("/proc/self/cgroup").read())
    if os.fork() == 0:  # a child the crash must take too
        import time
        while True:
            time.sleep(1)
    boundary("after_provider_accept")

with Supervisor(workdir=work) as sup:
    kinds = []
    for n in range(3):
        trace = work / f"t{n}.jsonl"
        w = sup.start(f"w{n}", target, trace_path=trace, arms=[Arm("after_provider_accept", 1)])
        out = sup.wait(w, timeout_s=60, trace_path=trace)
        kinds.append(out.kind is OutcomeKind.CRASHED_AS_PLANNED and out.stragglers == 0)
        assert not w.tree.members(), w.tree.members()
    print(kinds, dict(sup.births))
""",
        tmp_path,
    )
    assert out.strip() == "[True, True, True] {'born in its cgroup': 3}"
    for f in tmp_path.glob("cg-*"):
        line = next(ln for ln in f.read_text().splitlines() if ln.startswith("0::"))
        assert "/crash-harness-" in line
        assert line.rsplit("/", 1)[1].startswith("w")
