"""The wall (``harness.engine.process._wall``) against hostile workers (tests/_hostile_wall.py):
each
is a real ``certify`` of a worker that does the reference's work, then tries to reach the
judge and writes down what it managed. With the wall on it manages nothing, and a case where
it managed something is never a pass. On 8213f3e (no wall) every one of them got through.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness import boundary
from harness.engine.process import _wall
from harness.engine.process._boundary import Arm
from harness.engine.process._wall import ISOLATION_ENV
from harness.engine.process.supervisor import OutcomeKind, Supervisor
from tests._hostile_wall import DAEMON_LOCK_ENV, REPORT_ENV

ROOT = Path(__file__).resolve().parents[1]
_WALLED = "pid+mount namespaces, cgroup fs read-only, capabilities dropped"


def _certify(
    tmp_path: Path, system: str, *cases: str, wall: str = "on"
) -> tuple[int, str, dict[str, Any], dict[str, Any]]:
    """``certify`` of ``system`` on ``cases``: (exit, output, the report, the worker's own)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    hostile = tmp_path / "hostile.json"
    out = tmp_path / "reports"
    scratch = tmp_path / "scratch"  # a kept work dir stays here, pruning nobody else's
    scratch.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CRASH_HARNESS_TMPDIR=str(scratch),
        **{REPORT_ENV: str(hostile), DAEMON_LOCK_ENV: str(tmp_path / "daemon.lock")},
        **{ISOLATION_ENV: wall},
    )
    picked = [arg for case in cases for arg in ("--case", case)]
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify", "--system", system),
            *(*picked, "--seed", "1", "--report-dir", str(out)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    printed = proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    said = json.loads(hostile.read_text()) if hostile.exists() else {}
    return proc.returncode, printed, report, said


def _verdicts(report: dict[str, Any]) -> list[str]:
    return [case["verdict"] for case in report["cases"]]


def test_the_report_says_the_wall_is_up_and_the_reference_passes_behind_it(
    tmp_path: Path,
) -> None:
    """The reference certifies clean behind the wall, and the report's environment says the
    wall was up; with ``CRASH_HARNESS_ISOLATION=off`` it says it was off."""
    code, printed, report, _ = _certify(tmp_path / "on", "reference", "baseline")
    assert code == 0, printed
    assert _verdicts(report) == ["pass"], report["cases"]
    assert report["environment"]["isolation"].startswith("pid+mount namespaces"), report
    code, printed, report, _ = _certify(tmp_path / "off", "reference", "baseline", wall="off")
    assert code == 0, printed
    assert report["environment"]["isolation"].startswith("off"), report


def test_a_walled_worker_can_trace_neither_the_harness_nor_the_provider(tmp_path: Path) -> None:
    """PTRACE_ATTACH and PTRACE_SEIZE of its parent, its siblings and anything in its /proc:
    behind the wall it sees no provider, and every attach is refused (8213f3e, as root:
    attached to the harness and the provider)."""
    code, printed, report, said = _certify(tmp_path, "tests._hostile_wall:PTRACES", "baseline")
    assert said.get("refused"), (said, printed)  # it ran and tried
    assert said["attached"] == [], said
    assert said["siblings"] == [], said
    assert code == 0, printed
    assert _verdicts(report) == ["pass"], report["cases"]


def test_a_walled_worker_reads_no_other_case_and_no_provider_log(tmp_path: Path) -> None:
    """Around its own case dir it finds nothing: no other case's files, no provider log, and
    no other run in the scratch root (8213f3e: it read the provider's effect log and the
    first case's ledger and trace)."""
    code, printed, report, said = _certify(
        tmp_path, "tests._hostile_wall:READS", "baseline", "crash@after_claim#1"
    )
    assert "seen" in said, printed
    assert said["seen"] == [], said
    assert said["read"] == [], said
    assert said["scratch_others"] == [], said
    assert code == 0, printed
    assert set(_verdicts(report)) == {"pass"}, report["cases"]


def test_a_forked_worker_opens_no_admin_api_with_what_it_inherited(tmp_path: Path) -> None:
    """It finds the harness's admin client and provider handle in its memory, but no token
    in them (cleared and blanked in its copy before its code ran): the admin API stays shut
    (8213f3e: the inherited client's token opened it)."""
    code, printed, _, said = _certify(tmp_path, "tests._hostile_wall:ADMIN", "baseline")
    assert said.get("clients_found", [0])[0] > 0, (said, printed)
    assert said["tokens_found"] == 0, said
    assert said["opened"] == [], said
    assert code == 0, printed


@pytest.mark.skipif(os.geteuid() != 0, reason="the escape is a root worker's")
def test_a_root_worker_leaves_neither_its_cgroup_nor_a_daemon_behind(tmp_path: Path) -> None:
    """A root worker writes its pid into the root cgroup's cgroup.procs (refused: the cgroup
    file system is read-only in its view, and it has no CAP_SYS_ADMIN to remount it), then
    leaves a double-forked setsid daemon holding a lock: the daemon is gone when the harness
    has ended (8213f3e: it moved itself out and its daemon outlived the run)."""
    code, printed, _, said = _certify(tmp_path, "tests._hostile_wall:ESCAPES", "baseline")
    assert said.get("euid") == 0, (said, printed)
    assert said["moved"] == [], said
    assert said["cgroup_refused"], said
    assert any("Read-only" in why for why in said["cgroup_refused"]), said
    lock = os.open(tmp_path / "daemon.lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the daemon lives
    finally:
        os.close(lock)
    assert code in (0, 3), printed  # never a failure of the system for what was stopped


_AS_NOBODY = """
import os, sys, tempfile
from pathlib import Path
from harness import boundary
from harness.engine.process import _wall
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import Supervisor
root = Path(tempfile.mkdtemp(dir=sys.argv[1], prefix="crash-harness-nobody-"))
case = root / "case"
case.mkdir()
(root / "other-case").mkdir()

def target():
    seen = sorted(p for p in os.listdir("/proc") if p.isdigit())
    (case / "seen").write_text(f"{os.getuid()} {os.getpid()} {seen} {os.listdir(root)}")
    boundary("x")

with Supervisor(workdir=root) as sup:
    w = sup.start("w1", target, trace_path=case / "t.jsonl", arms=[Arm("x", 1)], logdir=case)
    out = sup.wait(w, timeout_s=60, trace_path=case / "t.jsonl")
print(out.kind.value, out.ns_pid, _wall.describe())
print((case / "seen").read_text())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become an unprivileged user")
def test_an_unprivileged_harness_walls_its_workers_in_a_user_namespace() -> None:
    """A harness that is not root asks for a user namespace with the PID and mount ones (its
    own uid mapped to itself): the worker sees only its init and itself, and only its own
    case (the wall's init must turn dumpable for the three writes of its maps: red
    without)."""
    if not Path("/usr/bin/setpriv").exists():
        pytest.skip("no setpriv here")
    closed = next((d for d in (ROOT, *ROOT.parents) if not d.stat().st_mode & stat.S_IXOTH), None)
    if closed is not None:  # e.g. a clone made in `mktemp -d` (0700)
        pytest.skip(f"the unprivileged user cannot reach this checkout: {closed} is closed to it")
    # a scratch dir the unprivileged user may reach (the test's own tmp_path is root's alone)
    scratch = Path(tempfile.mkdtemp(prefix="crash-harness-test-nobody-", dir="/dev/shm"))
    os.chmod(scratch, 0o777)
    try:
        proc = _as_nobody(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status, seen = proc.stdout.splitlines()[:2]
    kind, ns_pid, walled = status.split(" ", 2)
    assert (kind, walled) == ("crashed_as_planned", _WALLED), proc.stdout
    uid, pid, rest = seen.split(" ", 2)
    assert (uid, pid) == ("65534", ns_pid), proc.stdout
    assert rest == f"{sorted(['1', pid])} ['case']", proc.stdout


def _as_nobody(scratch: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *("/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"),
            *(sys.executable, "-c", _AS_NOBODY, str(scratch)),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT), "CRASH_HARNESS_ISOLATION": "on"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _reaches_its_boundary() -> None:
    boundary("after_provider_accept")


def test_a_harness_with_a_second_thread_still_walls_its_workers(tmp_path: Path) -> None:
    """clone3 is not used beside another thread: a go-between with one thread clones the init
    as the harness's child (CLONE_PARENT), so the worker is walled all the same (a pid of its
    own namespace) and its crash is classified as planned."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        trace = tmp_path / "t.jsonl"
        with Supervisor(workdir=tmp_path) as sup:
            arms = [Arm("after_provider_accept", 1)]
            w = sup.start("w1", _reaches_its_boundary, trace_path=trace, arms=arms)
            out = sup.wait(w, timeout_s=60, trace_path=trace)
    finally:
        stop.set()
        other.join()
    assert out.kind is OutcomeKind.CRASHED_AS_PLANNED, out
    assert out.ns_pid is not None, out
    assert "without it" not in _wall.describe(), _wall.describe()


def test_where_the_kernel_refuses_the_namespaces_workers_run_and_the_report_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel (or a container's policy) that refuses new namespaces: the worker runs
    without the wall, its crash is classified as before, and the environment names what is
    missing, once (not tried again per worker)."""
    from harness.engine.process import _born

    monkeypatch.setattr(_wall, "_refused", None)
    monkeypatch.setattr(_wall, "_walled", 0)
    tried = tmp_path / "tried"  # a file: with threads alive the clone is made in a go-between
    real = _born.fork_into

    def refusing(cgroup: str | None, *, namespaces: int = 0) -> int | None:
        if namespaces:
            with tried.open("a") as f:
                f.write(f"{namespaces}\n")
            raise _born.NamespacesRefused(1, "Operation not permitted")
        return real(cgroup, namespaces=namespaces)

    monkeypatch.setattr(_born, "fork_into", refusing)
    trace = tmp_path / "t.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        arms = [Arm("after_provider_accept", 1)]
        outs = []
        for name in ("w1", "w2"):
            w = sup.start(name, _reaches_its_boundary, trace_path=trace, arms=arms)
            outs.append(sup.wait(w, timeout_s=60, trace_path=trace))
    assert [o.kind for o in outs] == [OutcomeKind.CRASHED_AS_PLANNED] * 2, outs
    assert [o.ns_pid for o in outs] == [None, None], outs
    assert len(tried.read_text().splitlines()) == 1, tried.read_text()
    assert _wall.describe().startswith("missing: the kernel refused new PID/mount namespaces")


def _crashes_in_its_horse() -> None:
    """An RQ-like worker: the boundary is reached in a forked work-horse, not the root."""
    horse = os.fork()
    if horse == 0:
        boundary("in_horse")
        os._exit(0)
    os.waitpid(horse, 0)


def test_a_walled_worker_crashed_from_its_horse_leaves_no_straggler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind the wall the cgroup file system is read-only, so a worker-scope crash in a
    work-horse kills the tree itself: the others, the root, then itself. The harness sees
    the root end while the killer is still between those two kills, and must wait for it,
    not count it as a process that outlived its worker (an RQ sweep's crash in a horse was
    ``???`` with one straggler, the horse itself, about one CI run in four). Here the killer
    lingers there as a busy machine may make it; the outcome must hold however long that is
    within the harness's grace."""
    real_kill = os.kill

    def lingering_self_kill(pid: int, sig: int) -> None:
        if sig == signal.SIGKILL and pid == os.getpid():  # only a killer's own last kill
            time.sleep(0.5)
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", lingering_self_kill)
    trace = tmp_path / "t.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        w = sup.start("w1", _crashes_in_its_horse, trace_path=trace, arms=[Arm("in_horse")])
        out = sup.wait(w, timeout_s=60, trace_path=trace)
    if out.ns_pid is None:
        pytest.skip(f"the kernel refused the wall here: {_wall.describe()}")
    assert out.kind is OutcomeKind.CRASHED_AS_PLANNED, out
    assert (out.stragglers, out.left) == (0, []), out.left
