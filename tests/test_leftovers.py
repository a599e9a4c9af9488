"""Nothing a killed harness left behind outlives the next run: its case schemas and work
dirs are proven ours and its maker gone, then removed (by the next run, or by ``clean``);
what a live run, another host or a deliberate keep owns is never touched."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from harness.engine.process import _tree
from harness.engine.store import _owner, _scratch
from tests._procs import processes_with, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("CRASH_HARNESS_PG_URL")


def _harness(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _schemas_of(pid: int) -> list[str]:
    assert PG_URL is not None
    engine = create_engine(PG_URL)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT n.nspname FROM pg_namespace n JOIN pg_description d"
                    " ON d.objoid = n.oid AND d.classoid = 'pg_namespace'::regclass"
                    " WHERE d.description LIKE :tag"
                ),
                {"tag": f"{_owner.PREFIX} pid={pid} %"},
            ).all()
    finally:
        engine.dispose()
    return [r[0] for r in rows]


def _still_running(pids: list[int], timeout_s: float) -> list[int]:
    """Of ``pids``, those that have not exited within ``timeout_s`` (each watched by pidfd)."""
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # gone already
        try:
            if not select.select([fd], [], [], timeout_s)[0]:
                left.append(pid)
        finally:
            os.close(fd)
    return left


def _dirs_of(scratch: Path, pid: int) -> list[Path]:
    found = []
    for path in scratch.glob(f"{_scratch.PREFIX}*"):
        owner = _owner.parse((path / _scratch.OWNER_FILE).read_text())
        if owner is not None and owner.pid == pid:
            found.append(path)
    return found


@pytest.fixture
def killed_run(tmp_path: Path) -> tuple[int, Path, dict[str, str]]:
    """A certify run SIGKILLed while its worker runs: (its pid, its scratch root, its env)."""
    return _kill_mid_run(tmp_path, "tests._systems:HANGS", at_least=3)


@pytest.mark.parametrize("mode", ["cgroup", "walk"])
def test_a_workers_own_children_die_with_a_killed_harness(tmp_path: Path, mode: str) -> None:
    """A worker's pool child has no death signal of its own: when the harness is SIGKILLed,
    its guard kills the campaign's cgroup (walk mode: the worker's keeper kills everything
    under it), so the child is gone within seconds, not when a later run sweeps (it once
    outlived the harness by 11 s)."""
    if mode == "cgroup" and _tree.cgroup2_base() is None:
        pytest.skip("needs a writable cgroup2")
    _kill_mid_run(tmp_path, "tests._systems:HANGS_WITH_POOL", at_least=4, tree_mode=mode)


def _kill_mid_run(
    tmp_path: Path, system: str, *, at_least: int, tree_mode: str = ""
) -> tuple[int, Path, dict[str, str]]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    marker = f"{uuid.uuid4().hex}"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CH_TEST_READY_FIFO=str(fifo),
        CH_TEST_MARKER=marker,
        CRASH_HARNESS_TREE=tree_mode,
        **{_scratch.TMPDIR_ENV: str(scratch)},
    )
    db = ["--db", PG_URL] if PG_URL else []
    proc = _harness(
        *("certify", "--system", system, "--case", "baseline", *db),
        *("--seed", "1", "--report-dir", str(tmp_path / "r")),
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_ready(fifo, 60)
        started = processes_with(marker)
        # the harness, its provider, the hung worker (and its pool child)
        assert len(started) >= at_least, started
        # looked for while it lives: once it is dead, any run on the server (another test's)
        # may sweep its schemas
        if PG_URL:
            assert _schemas_of(proc.pid), "the killed run left no case schema to sweep"
        proc.kill()  # SIGKILL: no clean-up of any kind runs
        proc.communicate(timeout=60)
        # what the harness started dies with it (a death signal), long before any sweep
        assert _still_running(started, 10.0) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in processes_with(marker):  # a failed test leaves nothing either
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert _dirs_of(scratch, proc.pid), "the killed run left no work dir to sweep"
    return proc.pid, scratch, env


def test_the_next_run_sweeps_what_a_killed_run_left(
    killed_run: tuple[int, Path, dict[str, str]], tmp_path: Path
) -> None:
    pid, scratch, env = killed_run
    db = ["--db", PG_URL] if PG_URL else []
    nxt = _harness(
        *("certify", "--case", "baseline", "--seed", "2", *db),
        *("--report-dir", str(tmp_path / "r2")),
        env=env,
        cwd=tmp_path,
    )
    out, err = nxt.communicate(timeout=300)
    assert nxt.returncode == 0, out + err
    assert _dirs_of(scratch, pid) == []
    if PG_URL:
        assert _schemas_of(pid) == []


def test_clean_removes_what_a_killed_run_left(
    killed_run: tuple[int, Path, dict[str, str]], tmp_path: Path
) -> None:
    pid, scratch, env = killed_run
    left = _dirs_of(scratch, pid)
    schemas = _schemas_of(pid) if PG_URL else []
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "clean", *(["--db", PG_URL] if PG_URL else [])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in left:
        assert f"removed work dir {path}" in proc.stdout
    for name in schemas:
        assert f"dropped schema {name}" in proc.stdout
    assert _dirs_of(scratch, pid) == []
    if PG_URL:
        assert _schemas_of(pid) == []


def test_only_a_provably_gone_maker_is_gone() -> None:
    me = _owner.me()
    assert not _owner.is_gone(me)
    assert _owner.parse(me.tag()) == me
    assert _owner.is_gone(_owner.Owner(me.pid, me.start + 1, me.boot, me.host))  # pid reused
    assert _owner.is_gone(_owner.Owner(me.pid, me.start, "an-earlier-boot", me.host))
    assert not _owner.is_gone(_owner.Owner(me.pid, me.start + 1, me.boot, "another-host"))
    assert _owner.parse("crash-harness owner pid=1") is None
    assert _owner.parse("somebody else's schema") is None


def test_a_kept_work_dir_stays_until_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_scratch.TMPDIR_ENV, str(tmp_path))
    gone = _owner.me()
    gone = _owner.Owner(gone.pid, gone.start + 1, gone.boot, gone.host)
    kept, stale, live = (_scratch.make_workdir() for _ in range(3))
    for path in (kept, stale):
        (path / _scratch.OWNER_FILE).write_text(gone.tag())
    _scratch.keep(kept)
    assert [r.path for r in _scratch.sweep_stale()] == [stale]
    assert kept.exists()
    assert live.exists()
    assert [r.path for r in _scratch.sweep_stale(kept_too=True)] == [kept]
    assert live.exists()  # its maker (this test) still runs


def _recorded(path: Path) -> list[tuple[int, int]]:
    """The (pid, start time) pairs a DAEMONISES worker wrote."""
    if not path.exists():
        return []
    return [(int(p), int(s)) for p, s in (ln.split() for ln in path.read_text().splitlines())]


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


def _same_process_running(pid: int, start: int) -> bool:
    """Whether the process recorded as (pid, start time) still runs (a reused pid does not)."""
    return _start_time(pid) == start and not _tree.dying(pid)


def _kill_recorded(path: Path) -> None:
    """Teardown: SIGKILL every recorded daemon that is still the one recorded."""
    for pid, start in _recorded(path):
        if _same_process_running(pid, start):
            os.kill(pid, signal.SIGKILL)


def test_walk_mode_leaves_no_escaped_daemon_after_a_killed_run(tmp_path: Path) -> None:
    """Walk mode (no cgroup): a worker double-forks a daemon (``setsid``, its parent gone),
    then the harness is SIGKILLed. The daemon does not outlive ``crash-harness clean`` (the
    worker's keeper kills it when the harness dies; ``clean`` kills what a keeper could not),
    and ``clean`` does not call that "nothing left behind"."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    daemons = tmp_path / "daemons"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CH_TEST_READY_FIFO=str(fifo),
        CH_TEST_DAEMON_FILE=str(daemons),
        CRASH_HARNESS_TREE="walk",
        # the keeper's own work, as on a kernel without namespaces: the daemon's pid it writes
        # down is then the harness's (behind the wall: tests/test_hostile_wall.py)
        CRASH_HARNESS_ISOLATION="off",
        **{_scratch.TMPDIR_ENV: str(scratch)},
    )
    proc = _harness(
        *("certify", "--system", "tests._systems:HANGS_WITH_DAEMON", "--case", "baseline"),
        *("--seed", "1", "--report-dir", str(tmp_path / "r")),
        env=env,
        cwd=tmp_path,
    )
    try:
        try:
            wait_ready(fifo, 60)
            recorded = _recorded(daemons)
            assert len(recorded) == 1, recorded
            assert _same_process_running(*recorded[0])
            proc.kill()  # SIGKILL: no clean-up of any kind runs in the harness
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        clean = subprocess.run(
            [sys.executable, "-m", "harness", "clean"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "nothing left behind" not in clean.stdout
        pid, _ = recorded[0]
        assert _still_running([pid], 10.0) == [], "the escaped daemon outlived clean"
    finally:
        _kill_recorded(daemons)


def test_clean_kills_what_a_killed_runs_keeper_still_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeper whose harness is gone but which still holds processes (say it was stopped, or
    has not got to it yet): ``clean`` finds it by its record (pid and start time, the harness
    named as owner), kills everything under it, and says so."""
    from harness.engine.process import _keeper

    monkeypatch.setenv(_scratch.TMPDIR_ENV, str(tmp_path))
    # a stand-in keeper holding a child: a process that forks one and sleeps
    keeper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal\nif os.fork() == 0:\n    signal.pause()\n"
            "print(os.getpid(), flush=True)\nsignal.pause()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert keeper.stdout is not None
        keeper.stdout.readline()  # it has forked its child
        held = _tree._descendants(keeper.pid) - {keeper.pid}
        assert len(held) == 1
        me = _owner.me()
        gone = _owner.Owner(me.pid, me.start + 1, me.boot, me.host)  # a pid reused: gone
        records = tmp_path / f"{_keeper.RECORDS_DIR}-{os.getuid()}"
        records.mkdir()
        start = _start_time(keeper.pid)
        (records / str(keeper.pid)).write_text(
            f"{gone.tag()}\nkeeper pid={keeper.pid} start={start}\n"
        )
        clean = subprocess.run(
            [sys.executable, "-m", "harness", "clean"],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert f"killed keeper {keeper.pid}" in clean.stdout, clean.stdout
        assert "1 process(es) still under it" in clean.stdout, clean.stdout
        keeper.wait(timeout=60)
        assert keeper.returncode == -signal.SIGKILL
        assert _still_running(sorted(held), 10.0) == []
        assert not list(records.iterdir())
    finally:
        for pid in _tree._descendants(keeper.pid) - {keeper.pid}:
            os.kill(pid, signal.SIGKILL)
        if keeper.poll() is None:
            keeper.kill()
            keeper.wait()
        if keeper.stdout is not None:
            keeper.stdout.close()


def test_a_straggler_is_on_the_console_and_in_every_report(tmp_path: Path) -> None:
    """Walk mode: a worker that leaves a double-forked daemon each time it runs. The daemon
    is killed when its worker ends, and the run names it (pid, command line) on the console
    and in report.md, report.xml (JUnit) and report.html, not only in report.json; the case
    is unknown, never a pass (8213f3e: exit 0), and no violation on that ground alone."""
    daemons = tmp_path / "daemons"
    reports = tmp_path / "r"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CH_TEST_DAEMON_FILE=str(daemons),
        CRASH_HARNESS_TREE="walk",
        CRASH_HARNESS_ISOLATION="off",  # the keeper's own work (see above)
        **{_scratch.TMPDIR_ENV: str(tmp_path / "scratch")},
    )
    (tmp_path / "scratch").mkdir()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                *("-m", "harness", "certify", "--system", "tests._systems:LEAVES_DAEMON"),
                *("--case", "baseline", "--seed", "1", "--report-dir", str(reports)),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        recorded = _recorded(daemons)
        assert recorded, proc.stdout + proc.stderr
        for pid, start in recorded:
            assert not _same_process_running(pid, start), "a daemon outlived its worker"
        assert proc.returncode == 3, proc.stdout + proc.stderr
        ((daemon, _),) = recorded
        said = "of worker w1 was still running after its first process ended; the harness"
        assert f"straggler: pid {daemon} (" in proc.stdout, proc.stdout
        assert said in proc.stdout, proc.stdout
        report = json.loads((reports / "report.json").read_text())
        (case,) = report["cases"]
        assert case["verdict"] == "unknown", case
        assert not [n for n, r in case["invariants"].items() if r["status"] != "pass"], case
        assert [w["stragglers"] for w in case["workers"]] == [1]
        assert [p["pid"] for p in case["leftovers"]] == [daemon], case
        assert "tests._systems:LEAVES_DAEMON" in case["leftovers"][0]["command"], case
        md = (reports / "report.md").read_text()
        assert "**Stragglers (1)**" in md
        assert f"baseline: pid {daemon} (" in md
        junit = ET.fromstring((reports / "report.xml").read_text())
        props = [
            p.get("value") or "" for p in junit.iter("property") if p.get("name") == "straggler"
        ]
        assert len(props) == 1, props
        assert said in props[0]
        html = (reports / "report.html").read_text()
        assert "Stragglers (1)" in html
        assert said in html
    finally:
        _kill_recorded(daemons)
