"""Near-side crash points (``harness.engine.process._hooks``): a worker with no line of the harness
in
it is crashed before and after each send and commit it makes, in every Python process of its
tree, and only there (never the harness's own traffic, never while disarmed).

The workers here are plain programs run for real (forked by the supervisor, then exec'd, as a
``--system-cmd`` worker is), talking real HTTP and SMTP on loopback to a recorder that logs
each request to a file *before* it answers, and committing to real SQLite files.
"""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.engine.process import _boundary, _hooks
from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import OutcomeKind, Supervisor, WorkerOutcome
from harness.engine.store import trace as trace_store
from tests._cli import run_harness

ROOT = Path(__file__).resolve().parent.parent


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A provider reduced to its durable log: the request is on disk before the reply."""

    log: Path

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(self.log, "ab") as f:
            f.write(body + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(url, log file) of a loopback HTTP recorder on a free port."""
    log = tmp_path / "provider.log"
    log.touch()
    handler = type("Recorder", (_Recorder,), {"log": log})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks/orders", log
    finally:
        server.shutdown()
        server.server_close()


class _Smtp(socketserver.StreamRequestHandler):
    """Just enough SMTP for ``smtplib.SMTP.sendmail`` (EHLO, MAIL, RCPT, DATA, QUIT)."""

    def handle(self) -> None:
        self.wfile.write(b"220 ready\r\n")
        while line := self.rfile.readline():
            verb = line[:4].upper()
            if verb == b"EHLO":
                self.wfile.write(b"250 hi\r\n")
            elif verb == b"DATA":
                self.wfile.write(b"354 go\r\n")
                while self.rfile.readline() not in (b".\r\n", b""):
                    pass
                self.wfile.write(b"250 queued\r\n")
            elif verb == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


@pytest.fixture
def smtp_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def line_of(source: str, marker: str) -> int:
    """The 1-based line of ``source`` that ends with ``# marker``."""
    (found,) = [i for i, line in enumerate(source.splitlines(), 1) if line.endswith(f"# {marker}")]
    return found


#: a worker that knows nothing of the harness: send, then record, twice
PLAIN = """\
import sqlite3
import sys

import requests

url, db = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(db)
conn.execute("create table if not exists sent (n integer)")
conn.commit()  # SCHEMA
for n in range(2):
    requests.post(url, json={"n": n}, timeout=30)  # SEND
    conn.execute("insert into sent values (?)", (n,))
    conn.commit()  # RECORD
"""


def _exec(script: Path, *args: str) -> Callable[[], None]:
    """A supervisor target that execs ``script`` as a ``--system-cmd`` worker is exec'd."""

    def run() -> None:  # pragma: no cover - runs in the forked worker
        os.execv(sys.executable, [sys.executable, str(script), *args])

    return run


def _run(
    tmp_path: Path, target: Callable[[], None], arms: list[Arm], *, hooks: bool = True
) -> tuple[WorkerOutcome, list[trace_store.TraceEvent]]:
    trace = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        worker = sup.start("w1", target, trace_path=trace, arms=arms, hooks=hooks)
        outcome = sup.wait(worker, timeout_s=120, trace_path=trace)
    return outcome, [e for e in trace_store.read(trace) if e.boundary is not None]


def _sent(log: Path) -> list[int]:
    return [json.loads(line)["n"] for line in log.read_text().splitlines()]


def _recorded(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [n for (n,) in conn.execute("select n from sent order by n")]


def test_every_send_and_commit_of_a_plain_worker_is_a_point_named_by_its_call_site(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    url, log = provider
    script = tmp_path / "plain_worker.py"
    script.write_text(PLAIN)
    outcome, hits = _run(tmp_path, _exec(script, url, str(tmp_path / "w.db")), [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    schema, send, record = (line_of(PLAIN, m) for m in ("SCHEMA", "SEND", "RECORD"))
    assert [(e.boundary, e.hit) for e in hits] == [
        (f"before_commit.plain_worker.{schema}", 1),
        (f"after_commit.plain_worker.{schema}", 1),
        *(
            pair
            for n in (1, 2)
            for pair in (
                (f"before_send.plain_worker.{send}", n),
                (f"after_send.plain_worker.{send}", n),
                (f"before_commit.plain_worker.{record}", n),
                (f"after_commit.plain_worker.{record}", n),
            )
        ),
    ]
    port = url.split(":")[2].split("/")[0]
    targets = trace_store.point_targets(hits)
    assert targets[f"after_send.plain_worker.{send}"] == [f"POST 127.0.0.1:{port}/hooks/orders"]
    assert targets[f"after_commit.plain_worker.{record}"] == [f"sqlite:///{tmp_path / 'w.db'}"]
    assert _sent(log) == [0, 1]
    assert _recorded(tmp_path / "w.db") == [0, 1]


def test_a_crash_after_the_send_leaves_the_effect_accepted_and_unrecorded(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    """The hard window, found with no annotation: the provider logged the request, the
    worker died (a real SIGKILL) before its own commit."""
    url, log = provider
    script = tmp_path / "plain_worker.py"
    script.write_text(PLAIN)
    point = f"after_send.plain_worker.{line_of(PLAIN, 'SEND')}"
    outcome, _ = _run(tmp_path, _exec(script, url, str(tmp_path / "w.db")), [Arm(point, 2)])
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED, outcome.stderr_tail
    assert (outcome.signal, outcome.boundary, outcome.hit) == ("SIGKILL", point, 2)
    assert _sent(log) == [0, 1]  # the provider has both
    assert _recorded(tmp_path / "w.db") == [0]  # the worker's ledger has one


def test_a_crash_before_the_commit_and_after_it(tmp_path: Path, provider: tuple[str, Path]) -> None:
    url, _ = provider
    script = tmp_path / "plain_worker.py"
    script.write_text(PLAIN)
    record = line_of(PLAIN, "RECORD")
    for kind, kept in (("before_commit", [0]), ("after_commit", [0, 1])):
        own = tmp_path / kind  # its own trace and hit counters
        own.mkdir()
        db = own / "w.db"
        arm = Arm(f"{kind}.plain_worker.{record}", 2)
        outcome, _ = _run(own, _exec(script, url, str(db)), [arm])
        assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED, outcome.stderr_tail
        assert _recorded(db) == kept, kind


#: a forked worker that is Python code of the user's, run in the forked process itself
FORKED = """\
import smtplib
import sqlalchemy
from sqlalchemy.orm import Session


def main(smtp_port, db):
    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:  # BEGIN
        conn.exec_driver_sql("create table t (a integer)")
    with smtplib.SMTP("127.0.0.1", smtp_port) as smtp:
        smtp.sendmail("me@x", ["ann@x", "bob@y"], "Subject: hi\\r\\n\\r\\nhello")  # MAIL
    with Session(engine) as session:
        session.execute(sqlalchemy.text("insert into t values (1)"))
        session.commit()  # SESSION
"""


def test_a_forked_worker_is_hooked_smtp_and_sqlalchemy_alike(
    tmp_path: Path, smtp_port: int
) -> None:
    module = tmp_path / "forked_worker.py"
    module.write_text(FORKED)

    def target() -> None:  # pragma: no cover - runs in the forked worker
        import runpy

        runpy.run_path(str(module))["main"](smtp_port, tmp_path / "f.db")

    outcome, hits = _run(tmp_path, target, [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    begin, mail, session = (line_of(FORKED, m) for m in ("BEGIN", "MAIL", "SESSION"))
    # one commit each, though SQLAlchemy commits through the hooked sqlite3 driver
    assert [e.boundary for e in hits] == [
        f"before_commit.forked_worker.{begin}",
        f"after_commit.forked_worker.{begin}",
        f"before_send.forked_worker.{mail}",
        f"after_send.forked_worker.{mail}",
        f"before_commit.forked_worker.{session}",
        f"after_commit.forked_worker.{session}",
    ]
    targets = trace_store.point_targets(hits)
    assert targets[f"after_send.forked_worker.{mail}"] == [
        f"SMTP 127.0.0.1:{smtp_port} to ann@x, bob@y"
    ]
    assert targets[f"after_commit.forked_worker.{session}"] == [f"sqlite:///{tmp_path / 'f.db'}"]


#: a poller: commits that wrote rows and commits that found nothing, through sqlite3 and
#: through SQLAlchemy
POLLER = """\
import sys

import sqlalchemy
import sqlite3

db = sys.argv[1]
conn = sqlite3.connect(db)
conn.execute("create table t (a integer)")
conn.execute("insert into t values (1)")
conn.commit()  # WRITE
conn.execute("select a from t").fetchall()
conn.commit()  # POLL
with conn:  # POLL_WITH
    conn.execute("select a from t").fetchall()
with conn:  # WRITE_WITH
    conn.execute("update t set a = 2")
conn.execute("delete from t where a = 99")
conn.commit()  # DELETE_NOTHING
engine = sqlalchemy.create_engine(f"sqlite:///{db}")
with engine.begin() as c:  # SA_POLL
    c.exec_driver_sql("select a from t").all()
with engine.begin() as c:  # SA_WRITE
    c.exec_driver_sql("insert into t values (3)")
"""


def test_a_commit_that_changed_no_row_is_marked_idle_and_one_that_did_is_not(
    tmp_path: Path,
) -> None:
    """An idle loop's poll is a hit like any other (it can be crashed), marked
    ``changed: false`` so a daemon's quiet window does not count it as activity; a commit
    that wrote a row carries no mark (activity). Red with the mark left out."""
    script = tmp_path / "poller.py"
    script.write_text(POLLER)
    outcome, hits = _run(tmp_path, _exec(script, str(tmp_path / "p.db")), [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    marks = {
        e.boundary: (e.detail or {}).get("changed", True)
        for e in hits
        if e.boundary is not None and e.boundary.startswith("after_commit.")
    }
    expected = {
        "WRITE": True,
        "POLL": False,
        "POLL_WITH": False,
        "WRITE_WITH": True,
        "DELETE_NOTHING": False,
        "SA_POLL": False,
        "SA_WRITE": True,
    }
    assert marks == {
        f"after_commit.poller.{line_of(POLLER, m)}": changed for m, changed in expected.items()
    }
    befores = [e for e in hits if e.boundary and e.boundary.startswith("before_commit.")]
    assert [(e.detail or {}).get("changed", True) for e in befores] == list(expected.values())


#: a worker whose sends happen two execs down (worker -> middle -> leaf), twice
TREE = {
    "tree_worker.py": """\
import subprocess
import sys

for _ in range(2):
    subprocess.run([sys.executable, sys.argv[1] + "/middle.py", *sys.argv[1:]], check=True)
open(sys.argv[1] + "/done", "w").close()
""",
    "middle.py": """\
import subprocess
import sys

subprocess.run([sys.executable, sys.argv[1] + "/leaf.py", *sys.argv[1:]], check=True)
""",
    "leaf.py": """\
import sys
import urllib.request

request = urllib.request.Request(sys.argv[2], data=b'{"n": 7}')
urllib.request.urlopen(request, timeout=30).read()  # LEAF
""",
}


def test_an_execd_grandchild_is_hooked_and_counted_over_the_whole_tree(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    url, log = provider
    for name, source in TREE.items():
        (tmp_path / name).write_text(source)
    point = f"after_send.leaf.{line_of(TREE['leaf.py'], 'LEAF')}"
    outcome, hits = _run(
        tmp_path, _exec(tmp_path / "tree_worker.py", str(tmp_path), url), [Arm(point, 2)]
    )
    # the second grandchild's send is hit 2 (the first was another process's): the whole
    # worker dies there, so the worker never gets to write "done"
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED, outcome.stderr_tail
    assert (outcome.boundary, outcome.hit) == (point, 2)
    assert len({e.pid for e in hits}) == 2, hits
    assert _sent(log) == [7, 7]
    assert not (tmp_path / "done").exists()


def test_disarmed_hooks_do_nothing(tmp_path: Path, provider: tuple[str, Path]) -> None:
    """Installed, then disarmed: every send and commit goes through, and nothing is traced."""
    url, log = provider
    trace = tmp_path / "trace.jsonl"
    code = f"""
from harness.engine.process import _boundary
from harness.engine.process import _hooks
_boundary.configure(trace_path={str(trace)!r}, worker="w1", arms=[_boundary.Arm("x", 1)])
_hooks.install()
_boundary.disarm()
exec(open({str(tmp_path / "plain_worker.py")!r}).read())
"""
    (tmp_path / "plain_worker.py").write_text(PLAIN)
    (tmp_path / "disarmed.py").write_text(code)
    subprocess.run(
        [sys.executable, str(tmp_path / "disarmed.py"), url, str(tmp_path / "d.db")],
        check=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert trace.read_text() == ""
    assert _sent(log) == [0, 1]
    assert _recorded(tmp_path / "d.db") == [0, 1]


def test_without_a_plan_the_injected_sitecustomize_loads_nothing(tmp_path: Path) -> None:
    """A Python process on the injected path but not driven (no ``CRASH_HARNESS_CONTROL``):
    no harness module is imported, nothing is patched."""
    env = {k: v for k, v in os.environ.items() if k != _boundary.CONTROL_ENV}
    env["PYTHONPATH"] = _hooks.SITE_DIR
    probe = (
        "import sys, http.client;"
        " print(sorted(m for m in sys.modules if m.split('.')[0] == 'harness'))"
    )
    said = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert said.stdout.strip() == "[]", said.stdout + said.stderr


#: a worker that sends once through the harness's own helper, once itself
HELPED = """\
import sys

import requests
from harness.usersystem import Job

job = Job("r1", "t", "ann@x", "d1", "k1", "ch-1", "hi", {}, sys.argv[1], {})
job.post(timeout_s=30)  # HELPER
requests.post(sys.argv[1], json={"n": 2}, timeout=30)  # OWN
"""


def test_the_harness_own_traffic_is_never_a_point(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    url, log = provider
    script = tmp_path / "helped.py"
    script.write_text(HELPED)
    outcome, hits = _run(tmp_path, _exec(script, url), [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    assert len(log.read_text().splitlines()) == 2  # both were sent
    own = line_of(HELPED, "OWN")
    assert [e.boundary for e in hits] == [f"before_send.helped.{own}", f"after_send.helped.{own}"]


def test_the_harness_process_itself_is_never_hooked(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    import http.client

    url, _ = provider
    script = tmp_path / "plain_worker.py"
    script.write_text(PLAIN)
    outcome, hits = _run(tmp_path, _exec(script, url, str(tmp_path / "w.db")), [])
    assert outcome.kind is OutcomeKind.COMPLETED
    assert hits
    assert not hasattr(http.client.HTTPConnection.putrequest, "__wrapped__")
    assert not getattr(sqlite3.connect, "_crash_harness_hooked", False)
    assert not _hooks.installed()
    assert os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != _hooks.SITE_DIR


def test_a_users_own_sitecustomize_still_runs(
    tmp_path: Path, provider: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = provider
    own = tmp_path / "own_site"
    own.mkdir()
    marker = tmp_path / "own_site_ran"
    (own / "sitecustomize.py").write_text(  # says which program it ran in
        f"import sys\nopen({str(marker)!r}, 'a').write(sys.argv[0] + '\\n')\n"
    )
    script = tmp_path / "plain_worker.py"
    script.write_text(PLAIN)
    monkeypatch.setenv("PYTHONPATH", str(own))  # the user's, inherited by the forked worker
    outcome, hits = _run(tmp_path, _exec(script, url, str(tmp_path / "w.db")), [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    assert str(script) in marker.read_text().splitlines()  # theirs ran in the worker
    assert hits  # and so did ours


def test_child_env_puts_the_hooks_first_and_keeps_the_path(tmp_path: Path) -> None:
    _boundary.configure(trace_path=str(tmp_path / "t"), worker="w1", arms=[])
    try:
        env = _hooks.child_env({"PYTHONPATH": f"/a{os.pathsep}{_hooks.SITE_DIR}{os.pathsep}/b"})
    finally:
        _boundary.disarm()
    assert env["PYTHONPATH"] == os.pathsep.join([_hooks.SITE_DIR, "/a", "/b"])
    assert _boundary.CONTROL_ENV in env
    assert _hooks.child_env({}) == {}  # not driven: nothing to hand on


@pytest.mark.parametrize(
    ("filename", "line", "where"),
    [
        ("/srv/app/plain_worker.py", 42, "plain_worker.42"),
        ("/srv/app/my.worker v2.py", 7, "my_worker_v2.7"),
        ("<string>", 3, "_string_.3"),
        ("/srv/app/notifier/__main__.py", 37, "notifier.37"),  # python -m notifier
        ("/srv/app/notifier/__init__.py", 5, "notifier.5"),
    ],
)
def test_a_call_site_is_a_stem_a_case_id_can_hold(filename: str, line: int, where: str) -> None:
    from harness.engine.plan.schedule import CaseSpec

    assert _hooks.point_where(filename, line) == where
    assert CaseSpec.parse(f"crash@after_send.{where}#1").boundary == f"after_send.{where}"


# -- the plan: certify, sweep and case ids over discovered points --------------------------------

#: a program certified through the harness's command route; it reads its settings with the
#: harness's helpers, but marks no boundary: what it sends is found
SENDER = """\
import requests
from harness import WorkerConfig, jobs

for job in list(jobs(WorkerConfig.from_env())):
    requests.post(job.url, json=job.message, headers=job.headers, timeout=30)  # SEND
"""


def _cli(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    return run_harness(tmp_path, tmp_path, *args)


def test_certify_lists_discovered_points_and_a_case_id_mixes_them_with_named_ones(
    tmp_path: Path,
) -> None:
    mixed = SENDER.replace("  # SEND", "  # SEND\n    boundary('after_provider_accept')")
    mixed = "from harness import boundary\n" + mixed
    (tmp_path / "prog.py").write_text(mixed)
    send = f"after_send.prog.{line_of(mixed, 'SEND')}"
    case = f"crash@{send}#2+crash@after_provider_accept#1"
    status, said, report = _cli(
        tmp_path,
        *("certify", "--system-cmd", "python prog.py", "--seed", "3", "--case", case),
        *("--set", "provider_faults=[]"),
    )
    assert status == 0, said
    assert "discovered 2 near-side point(s)" in said, said
    listed = [line for line in said.splitlines() if line.strip().startswith(send)]
    assert len(listed) == 1, said
    assert "POST 127.0.0.1:" in listed[0]
    assert "/v1/messages" in listed[0], listed
    (only,) = report["cases"]
    assert only["id"] == case
    assert [x["landing"] for x in only["landings"]] == ["landed", "landed"], only["landings"]


def test_a_program_with_no_send_nor_commit_is_a_coverage_gap(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("print('nothing to do')\n")
    status, said, _ = _cli(tmp_path, "certify", "--system-cmd", "python prog.py", "--seed", "3")
    assert status == 1, said
    assert "dry run reached: no boundary" in said, said
    assert "coverage gap: the program reached no boundary() and no send or commit" in said


def test_sweep_crashes_every_hit_of_every_discovered_point(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(SENDER)
    (tmp_path / "plain.toml").write_text(
        '[scenario]\nsystem = "cmd:python prog.py"\nseed = 5\n'
        "[workload]\nruns = 1\ndestinations_per_topic = 2\n[provider]\nfaults = []\n"
    )
    status, said, report = _cli(tmp_path, "sweep", "plain.toml", "--determinism", "0")
    assert status == 0, said
    send = line_of(SENDER, "SEND")
    assert "discovered 2 near-side point(s)" in said, said
    sweep = report["sweep"]
    ids = [c["id"] for c in report["cases"]]
    assert ids == [
        "baseline",
        f"crash@before_send.prog.{send}#1",
        f"crash@before_send.prog.{send}#2",
        f"crash@after_send.prog.{send}#1",
        f"crash@after_send.prog.{send}#2",
        # the far side of the same two sends: the provider holds each reply in turn
        "crash@accepted.payments#1",
        "crash@accepted.payments#2",
    ]
    assert (sweep["pairs_expected"], sweep["pairs_covered"]) == (6, 6), sweep
    assert report["summary"]["boundaries_documented"] == 3  # two near-side, one far-side


def test_a_process_that_cannot_import_the_harness_says_so(tmp_path: Path) -> None:
    """Another interpreter, another venv: if even the harness's own source root does not
    import, the process runs unhooked and says so on its stderr, never silently."""
    broken = tmp_path / "shadow" / "harness"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('not this harness')\n")
    _boundary.configure(trace_path=str(tmp_path / "t"), worker="w1", arms=[])
    try:
        env = dict(os.environ, **_hooks.child_env({"PYTHONPATH": str(tmp_path / "shadow")}))
    finally:
        _boundary.disarm()
    said = subprocess.run(
        [sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True, check=True
    )
    assert said.stdout == "ran\n"
    assert "crash-harness: no near-side hooks in pid" in said.stderr, said.stderr
    assert "not this harness" in said.stderr


@pytest.mark.parametrize("passed", [True, False])
def test_a_grandchild_keeps_the_harness_pipes_only_if_it_holds_them(
    tmp_path: Path, *, passed: bool
) -> None:
    """``subprocess`` closes the pipes it is not passed: a grandchild then has the plan but no
    pipes, and must not take whatever file has their numbers for them (here: pipes of its
    own, opened until they have those numbers)."""
    events_r, events_w = os.pipe()
    control_r, control_w = os.pipe()
    _boundary.configure(
        trace_path=str(tmp_path / "t"),
        worker="w1",
        arms=[],
        events_fd=events_w,
        control_fd=control_r,
    )
    try:
        # armed at ``import harness``, below, once its own pipes hold the numbers
        env = dict(os.environ, **_boundary.handoff_env(), PYTHONPATH=str(ROOT))
    finally:
        _boundary.disarm()
    probe = """
import json, os
plan = json.loads(os.environ["CRASH_HARNESS_CONTROL"])
mine = []
while True:  # until both numbers are open: passed to it, or pipes of its own
    try:
        os.fstat(plan["events_fd"]); os.fstat(plan["control_fd"])
        break
    except OSError:
        mine.append(os.pipe())
from harness.engine.process import _boundary as b
print(b._tracer.events_fd, b._tracer.control_fd)
"""
    try:
        said = subprocess.run(
            [sys.executable, "-c", probe],
            env=env,
            pass_fds=(events_w, control_r) if passed else (),
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        for fd in (events_r, events_w, control_r, control_w):
            os.close(fd)
    held = f"{events_w} {control_r}" if passed else "None None"
    assert said.stdout.strip() == held, said.stderr


def test_what_a_point_talked_to_is_a_reading_of_the_run_not_content() -> None:
    """Two runs of one seed talk to other ports, epochs and temp files: ``point_targets``
    is set aside when they are compared, the points and their hits are not."""
    from harness.engine.search.determinism import content

    case = {
        "boundaries_reached": {"after_send.w.3": 2},
        "point_targets": {"after_send.w.3": ["POST 127.0.0.1:41503/epoch/2/v1/messages"]},
    }
    seen = content({"cases": [case]})["cases"][0]
    assert seen == {"boundaries_reached": {"after_send.w.3": 2}, "point_targets": "<point_targets>"}


@pytest.mark.parametrize(
    ("system", "line", "discovers"),
    [
        ('"reference"', "discover = true", True),  # asked: on beside its boundaries
        ('"reference"', "", False),  # a system that declares its boundaries: off
        ('"cmd:python prog.py"', "", True),  # a program that declares none: on
        ('"cmd:python prog.py"', "discover = false", False),
    ],
)
def test_a_scenario_turns_discovery_on_or_off(
    tmp_path: Path, system: str, line: str, *, discovers: bool
) -> None:
    from harness.engine.plan import scenario as scenario_mod

    path = tmp_path / "s.toml"
    path.write_text(f"[scenario]\nsystem = {system}\n{line}\n")
    assert scenario_mod.load(path).build_system().discover is discovers


def test_a_scenario_discover_that_is_not_a_bool_names_its_line(tmp_path: Path) -> None:
    from harness.engine.plan import scenario as scenario_mod
    from harness.errors import BadInputError

    path = tmp_path / "s.toml"
    path.write_text('[scenario]\nsystem = "reference"\ndiscover = "yes"\n')
    with pytest.raises(BadInputError, match=r"s.toml:3: \[scenario.discover\] expected bool"):
        scenario_mod.load(path)


#: a worker committing on PostgreSQL through psycopg itself (and psycopg commits again as its
#: block ends, at the `with` line), then through SQLAlchemy on it
PSYCOPG = """\
import psycopg
import sqlalchemy


def main(url):
    with psycopg.connect(url) as conn:  # EXIT
        conn.execute("select 1")
        conn.commit()  # PSYCOPG
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:  # ENGINE
        conn.exec_driver_sql("select 1")
    engine.dispose()
"""


@pytest.mark.postgres
def test_psycopg_commits_are_points_once_each(tmp_path: Path) -> None:
    url = os.environ.get("CRASH_HARNESS_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CRASH_HARNESS_PG_URL is not set; CI must test PostgreSQL")
        pytest.skip("set CRASH_HARNESS_PG_URL to test PostgreSQL")
    module = tmp_path / "pg_worker.py"
    module.write_text(PSYCOPG)

    def target() -> None:  # pragma: no cover - runs in the forked worker
        import runpy

        runpy.run_path(str(module))["main"](url)

    outcome, hits = _run(tmp_path, target, [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    plain, end, engine = (line_of(PSYCOPG, m) for m in ("PSYCOPG", "EXIT", "ENGINE"))
    assert [e.boundary for e in hits] == [
        f"before_commit.pg_worker.{plain}",
        f"after_commit.pg_worker.{plain}",
        f"before_commit.pg_worker.{end}",
        f"after_commit.pg_worker.{end}",
        f"before_commit.pg_worker.{engine}",
        f"after_commit.pg_worker.{engine}",
    ]
    (target_seen,) = trace_store.point_targets(hits)[f"after_commit.pg_worker.{plain}"]
    assert target_seen.startswith("postgresql://")
