"""Hostile workers that leave something behind, or fill the harness's disk: never a pass.

Each runs ``crash-harness certify`` as a subprocess with ``CRASH_HARNESS_ISOLATION=off``,
so what is tested is what the harness finds and stops without the kernel's namespaces.
The workers are in ``tests/_hostile_leftovers.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness.engine.case.judge import _verdict
from harness.engine.process import _tree
from harness.engine.store import _scratch
from harness.errors import ExitStatus
from harness.invariants import CheckResult, Status
from harness.reports.outcome import judge
from tests._hostile_leftovers import (
    DAEMON_FILE_ENV,
    FILLED_FILE_ENV,
    OUTSIDE_FIFO_ENV,
    QUIET_ENV,
    READ_ONLY_MOUNT_ENV,
)

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path, scratch: Path, **extra: str) -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CRASH_HARNESS_ISOLATION="off",
        **{_scratch.TMPDIR_ENV: str(scratch)},
        **extra,
    )


def _certify(system: str, reports: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "harness", "certify", "--system", system),
        *("--case", "baseline", "--seed", "1", "--report-dir", str(reports)),
    ]


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


def _recorded(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(p), int(s)) for p, s in (ln.split() for ln in path.read_text().splitlines())]


def _running(pid: int, start: int) -> bool:
    """Whether the process recorded as (pid, start time) still runs (a reused pid does not)."""
    return _start_time(pid) == start and not _tree.dying(pid)


def _every_format_names(reports: Path, pid: int) -> dict[str, Any]:
    """The case of report.json, after checking that report.md, the JUnit XML and the HTML
    name the leftover ``pid`` too."""
    (case,) = json.loads((reports / "report.json").read_text())["cases"]
    line = f"baseline: pid {pid} ("
    assert line in (reports / "report.md").read_text()
    junit = ET.fromstring((reports / "report.xml").read_text())
    said = [p.get("value") or "" for p in junit.iter("property") if p.get("name") == "straggler"]
    assert any(s.startswith(line) for s in said), said
    assert line in (reports / "report.html").read_text()
    return case


@pytest.mark.parametrize(
    ("tree", "daemon"), [("cgroup", "posts"), ("cgroup", "quiet"), ("walk", "posts")]
)
def test_a_daemon_that_leaves_its_cgroup_and_posts_late_is_named_stopped_no_pass(
    tmp_path: Path, tree: str, daemon: str
) -> None:
    """A double-forked setsid daemon that moves itself out of its worker's cgroup (root),
    waits for its worker to end and then leaves posts half-sent at the provider (or, quiet,
    does nothing at all): it is found (an orphan handed to the harness, or its keeper's),
    stopped, named on the console and in every report, and the case is unknown, exit 3
    (8213f3e: pass, exit 0, the daemon alive)."""
    if tree == "cgroup" and _tree.cgroup2_base() is None:
        pytest.skip("no cgroup v2 this process may create cgroups in")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    daemons = tmp_path / "daemons"
    quiet = str(int(daemon == "quiet"))
    env = _env(tmp_path, scratch, **{DAEMON_FILE_ENV: str(daemons), QUIET_ENV: quiet})
    if tree == "walk":
        env["CRASH_HARNESS_TREE"] = "walk"
    reports = tmp_path / "r"
    try:
        proc = subprocess.run(
            _certify("tests._hostile_leftovers:ESCAPES", reports),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        printed = proc.stdout + proc.stderr
        ((pid, start),) = _recorded(daemons)
        assert not _running(pid, start), "the daemon outlived its case"
        assert proc.returncode == ExitStatus.INCONCLUSIVE, printed
        assert f"straggler: pid {pid} (" in proc.stdout, printed
        case = _every_format_names(reports, pid)
        assert case["verdict"] == "unknown", case
        assert not [n for n, r in case["invariants"].items() if r["status"] == "fail"], case
        (left,) = case["leftovers"]
        assert left["pid"] == pid, left
        assert left["stopped"], left
        assert "tests._hostile_leftovers:ESCAPES" in left["command"], left
        assert "Traceback" not in printed
    finally:
        for pid, start in _recorded(daemons):
            if _running(pid, start):
                os.kill(pid, signal.SIGKILL)


def test_a_process_outside_the_case_holding_provider_connections_is_named_and_stopped(
    tmp_path: Path,
) -> None:
    """The worker hands its provider URL to a process outside its case (started before the
    harness: no child of it, in no worker's tree), which leaves 20 posts half-sent there.
    Only those connections tie it to the case: it is named with them, stopped, and the
    case is unknown, exit 3 (8213f3e: pass, exit 0)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    fifo = tmp_path / "url.fifo"
    os.mkfifo(fifo)
    os.mkfifo(f"{fifo}.ack")
    outside = subprocess.Popen(
        [sys.executable, "-m", "tests._hostile_leftovers", str(fifo)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    reports = tmp_path / "r"
    try:
        proc = subprocess.run(
            _certify("tests._hostile_leftovers:ASKS_OUTSIDE", reports),
            cwd=tmp_path,
            env=_env(tmp_path, scratch, **{OUTSIDE_FIFO_ENV: str(fifo)}),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        printed = proc.stdout + proc.stderr
        # the harness waited for it to end: it is gone (a zombie for this test to reap)
        assert outside.poll() == -signal.SIGKILL, printed
        assert proc.returncode == ExitStatus.INCONCLUSIVE, printed
        assert f"straggler: pid {outside.pid} (" in proc.stdout, printed
        case = _every_format_names(reports, outside.pid)
        assert case["verdict"] == "unknown", case
        (left,) = case["leftovers"]
        assert "20 connection(s) to provider payments" in left["held"], left
        assert "Traceback" not in printed
    finally:
        if outside.poll() is None:
            outside.kill()
            outside.wait()


def _unshare_refused() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1) here"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if probe.returncode == 0 else f"unshare --mount refused: {probe.stderr.strip()}"


def _on_a_small_disk(tmp_path: Path, system: str, *, reports_on_it: bool) -> tuple[int, str, Path]:
    """``certify`` of ``system`` in a mount namespace of its own, with the scratch dir (and,
    with ``reports_on_it``, the report dir) on an 8 MiB tmpfs of its own; (exit status,
    everything printed, report dir)."""
    refused = _unshare_refused()
    if refused is not None:
        pytest.skip(refused)
    disk = tmp_path / "disk"
    disk.mkdir()
    reports = disk / "r" if reports_on_it else tmp_path / "r"
    filled = tmp_path / "filled.json"
    env = _env(
        tmp_path,
        disk / "scratch",
        **{FILLED_FILE_ENV: str(filled), READ_ONLY_MOUNT_ENV: str(disk)},
    )
    command = " ".join(f"'{word}'" for word in _certify(system, reports))
    proc = subprocess.run(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c"),
            f"mount -t tmpfs -o size=8m tmpfs '{disk}' && mkdir '{disk}/scratch' && exec {command}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, reports


def _on_a_full_disk(tmp_path: Path, *, reports_on_it: bool) -> tuple[int, str, Path]:
    """FILLS_DISK on its small disk, which it filled to the last byte."""
    found = _on_a_small_disk(
        tmp_path, "tests._hostile_leftovers:FILLS_DISK", reports_on_it=reports_on_it
    )
    filled = json.loads((tmp_path / "filled.json").read_text())
    assert filled["stopped"] == "ENOSPC", found[1]  # it did fill it
    return found


def test_a_full_disk_makes_the_case_unknown_naming_it_never_a_violation(tmp_path: Path) -> None:
    """The worker fills the work dir's file system, then works on: the case is unknown
    because the harness's disk is full (said on the console and in the report), no
    invariant fails, exit 3, no traceback (8213f3e: no reason given, an OSError traceback)."""
    code, printed, reports = _on_a_full_disk(tmp_path, reports_on_it=False)
    assert "Traceback" not in printed
    assert code == ExitStatus.INCONCLUSIVE, printed
    assert "the harness could not write" in printed
    assert "No space left on device" in printed
    (case,) = json.loads((reports / "report.json").read_text())["cases"]
    assert case["verdict"] == "unknown", case
    assert "No space left on device" in case["undecided_because"], case
    assert not [n for n, r in case["invariants"].items() if r["status"] == "fail"], case


def test_a_report_that_cannot_be_written_is_one_line_and_the_harness_error_status(
    tmp_path: Path,
) -> None:
    """The report dir is on the disk the worker filled: the case's line still says why it
    is unknown, then one line says which report could not be written, and the exit status
    is the harness's error (4), never a traceback (8213f3e: an OSError traceback)."""
    code, printed, reports = _on_a_full_disk(tmp_path, reports_on_it=True)
    assert "Traceback" not in printed
    assert code == ExitStatus.INTERNAL_ERROR, printed
    assert f"error: the harness could not write {reports}" in printed, printed
    assert "No space left on device" in printed.splitlines()[-1], printed
    assert "???  baseline" in printed, printed


def test_a_read_only_disk_under_the_harness_gives_the_case_up_unknown_naming_it(
    tmp_path: Path,
) -> None:
    """The worker remounts the case's file system read-only as it ends: the harness's next
    write of the case fails, the case is given up as unknown naming the path and "Read-only
    file system", the campaign is inconclusive (exit 3), never a traceback (8213f3e: an
    OSError traceback, exit 4)."""
    code, printed, reports = _on_a_small_disk(
        tmp_path, "tests._hostile_leftovers:FREEZES_DISK", reports_on_it=False
    )
    assert "Traceback" not in printed
    assert code == ExitStatus.INCONCLUSIVE, printed
    (case,) = json.loads((reports / "report.json").read_text())["cases"]
    assert case["verdict"] == "unknown", case
    assert "the harness could not write" in case["undecided_because"], case
    assert "Read-only file system" in case["undecided_because"], case


def test_a_leftover_turns_a_pass_unknown_and_never_a_failure() -> None:
    """A case whose invariants all hold but that left a process behind is unknown; one whose
    invariant failed stays a failure; the campaign's rule reads it as inconclusive."""
    held = {"x": CheckResult(Status.PASS, "holds", {})}
    broken = {"x": CheckResult(Status.FAIL, "broken", {})}
    assert _verdict(held, [], left_behind=True) is Status.UNKNOWN
    assert _verdict(held, []) is Status.PASS
    assert _verdict(broken, [], left_behind=True) is Status.FAIL
    case = {
        "id": "baseline",
        "verdict": "unknown",
        "invariants": {"x": {"status": "pass", "summary": "holds", "evidence": {}}},
        "workers": [],
        "leftovers": [{"pid": 7, "command": "d", "held": "outlived its case", "stopped": True}],
    }
    outcome = judge({"cases": [case], "summary": {}})
    assert outcome.status is ExitStatus.INCONCLUSIVE, outcome
    assert any("outlived" in line for line in outcome.undecided), outcome


def test_both_views_of_a_providers_clients_agree_and_name_the_holder(tmp_path: Path) -> None:
    """A process outside this one holding a loopback connection to a listening port is
    found by the kernel's sock_diag dump and by /proc/net/tcp alike, and named by pid."""
    from harness.engine.process import _leftovers

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
                " print('held', flush=True); sys.stdin.read()",
                str(port),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as holder:
            try:
                assert holder.stdout is not None
                assert holder.stdout.readline() == "held\n"
                seen = _leftovers._diag_sockets_to({port})
                assert seen == _leftovers._proc_sockets_to({port})
                assert len(seen) == 1, seen
                held = _leftovers.clients({port: "payments"}, known=set())
                assert held == {holder.pid: [f"1 connection(s) to provider payments (port {port})"]}
            finally:
                holder.kill()
