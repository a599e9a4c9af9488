"""Commits a framework makes on its own threads (``harness.engine.process._framework_points``):
no line of the worker is on their stack, so the worker's call site cannot name them. A namer
that knows the framework names them in its terms (a LangGraph checkpoint, a node's writes),
and they are crash points like any other; one no namer knows is seen, counted and said,
never silently left out of the coverage.

The framework here is a stand-in with LangGraph's shape (a checkpointer's ``put`` and
``put_writes`` in ``site-packages/langgraph/checkpoint/``, called from a thread pool), so the
rule is held without the real library; ``examples/agents`` run the real one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from harness.engine.process._boundary import Arm
from harness.engine.process.supervisor import OutcomeKind, Supervisor, WorkerOutcome
from harness.engine.store import trace as trace_store
from tests._cli import run_harness

#: a checkpointer shaped as LangGraph's: each call commits, as SqliteSaver's ``cursor()`` does
SAVER = """\
import sqlite3


class Saver:
    def __init__(self, path):
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute("create table if not exists cp (what text)")
        self.conn.commit()

    def put(self, config, checkpoint, metadata, new_versions):
        self.conn.execute("insert into cp values ('checkpoint')")
        self.conn.commit()

    def put_writes(self, config, writes, task_id, task_path=()):
        self.conn.execute("insert into cp values ('writes')")
        self.conn.commit()
"""

#: DBOS's step runner shaped as DBOS 3's: the step's output recorded by a closure of it
DBOS_CORE = """\
def invoke_step(conn, step_name):
    def record_step_result():
        conn.execute("insert into cp values (?)", (step_name,))
        conn.commit()

    record_step_result()
"""

#: a library no namer knows, committing on its own thread too
OTHER = """\
def save(conn):
    conn.execute("insert into cp values ('other')")
    conn.commit()
"""

#: the agent: every durable write is handed to a pool, as LangGraph's loop does
AGENT = """\
import sys
from types import SimpleNamespace
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, sys.argv[1])
from langgraph.checkpoint.fake import Saver
from otherlib.store import save
from dbos._core import invoke_step

saver = Saver(sys.argv[2])
with ThreadPoolExecutor(1) as pool:
    start = {"updated_channels": ["__start__"]}
    pool.submit(saver.put, {}, start, {"source": "input"}, {}).result()
    pool.submit(
        saver.put, {}, {"updated_channels": ["branch:to:tools", "messages"]}, {"source": "loop"}, {}
    ).result()
    # LangGraph 1.x hands the task's path over joined, as a string
    pool.submit(saver.put_writes, {}, [("messages", 1)], "t1", "~__pregel_pull, tools").result()
    pool.submit(saver.put, {}, {"updated_channels": ["messages"]}, {"source": "loop"}, {}).result()
    # create_react_agent's shape: each tool call sent to the tools node (Send), its task
    # named by its index, its writes the tool's message
    sends = {"__pregel_tasks": [SimpleNamespace(node="tools")]}
    sent = {"updated_channels": ["__pregel_tasks", "messages"], "channel_values": sends}
    pool.submit(saver.put, {}, sent, {"source": "loop"}, {}).result()
    reply = [SimpleNamespace(tool_call_id="call_1", name="send_email")]
    push = "~__pregel_push, 0000000000, 0000000000"
    pool.submit(saver.put_writes, {}, [("messages", reply)], "t2", push).result()
    pool.submit(invoke_step, saver.conn, "pkg.module.notify").result()
    pool.submit(save, saver.conn).result()
"""


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "site-packages"
    for package, name, text in (
        ("langgraph/checkpoint", "fake.py", SAVER),
        ("otherlib", "store.py", OTHER),
        ("dbos", "_core.py", DBOS_CORE),
    ):
        folder = site / package
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
        for parent in [folder, *folder.relative_to(site).parents]:
            init = site / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    return site, agent


def _exec(agent: Path, *args: str) -> Callable[[], None]:
    def run() -> None:  # pragma: no cover - runs in the forked worker
        os.execv(sys.executable, [sys.executable, str(agent), *args])

    return run


def _run(tmp_path: Path, arms: list[Arm]) -> tuple[WorkerOutcome, list[trace_store.TraceEvent]]:
    site, agent = _layout(tmp_path)
    trace = tmp_path / "trace.jsonl"
    with Supervisor(workdir=tmp_path) as sup:
        worker = sup.start(
            "w1",
            _exec(agent, str(site), str(tmp_path / "cp.db")),
            trace_path=trace,
            arms=arms,
            hooks=True,
        )
        outcome = sup.wait(worker, timeout_s=120, trace_path=trace)
    return outcome, trace_store.read(trace)


def test_a_frameworks_commits_on_its_own_threads_are_points_in_its_terms(tmp_path: Path) -> None:
    outcome, events = _run(tmp_path, [])
    assert outcome.kind is OutcomeKind.COMPLETED, outcome.stderr_tail
    hits = [e.boundary for e in events if e.boundary is not None and e.boundary[0] == "a"]
    assert hits == [
        "after_commit.agent.10",  # the saver made in the agent's own line: its call site
        "after_commit.langgraph.checkpoint.input",
        "after_commit.langgraph.checkpoint.before_tools",
        "after_commit.langgraph.writes.tools",
        "after_commit.langgraph.checkpoint.end",
        "after_commit.langgraph.checkpoint.before_tools",
        "after_commit.langgraph.writes.tool_send_email",
        "after_commit.dbos.step_output.notify",
    ], hits
    # the library no namer knows: seen, counted, and no point
    assert trace_store.unnamed_points(events) == {
        "after_commit by otherlib/store:save": 1,
        "before_commit by otherlib/store:save": 1,
    }


def test_a_crash_lands_on_a_frameworks_own_thread(tmp_path: Path) -> None:
    """The commit of the tools node's writes, on the pool's thread, is crashed like a commit
    of the worker's own: the whole worker dies there, the writes durable, nothing after."""
    point = "after_commit.langgraph.writes.tools"
    outcome, events = _run(tmp_path, [Arm(point, 1)])
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED, outcome.stderr_tail
    assert (outcome.boundary, outcome.hit) == (point, 1)
    assert not [e for e in events if e.boundary == "after_commit.langgraph.checkpoint.end"]


#: a program whose every send is made by a pool's thread: no line of it is on the stack
POOLED = """\
from concurrent.futures import ThreadPoolExecutor

import requests
from harness import WorkerConfig, jobs

with ThreadPoolExecutor(2) as pool:
    for job in list(jobs(WorkerConfig.from_env())):
        pool.submit(requests.post, job.url, json=job.message, headers=job.headers, timeout=30)
"""


def test_a_sweep_says_what_it_saw_and_could_not_name(tmp_path: Path) -> None:
    """Sends no line of the worker made are no crash points; the sweep's dry run lists them,
    its coverage line says they were never crashed, and the report counts them: a sweep that
    crashed only the far side must not read as complete."""
    (tmp_path / "prog.py").write_text(POOLED)
    (tmp_path / "pooled.toml").write_text(
        '[scenario]\nsystem = "cmd:python prog.py"\nseed = 5\n'
        "[workload]\nruns = 1\ndestinations_per_topic = 2\n[provider]\nfaults = []\n"
    )
    status, said, report = run_harness(
        tmp_path, tmp_path, "sweep", "pooled.toml", "--determinism", "0"
    )
    assert "seen and not named: 4 send(s)/commit(s)" in said, said
    assert "x2   after_send by requests/api:post > urllib3/connection:getresponse" in said, said
    assert "4 send(s)/commit(s) the dry run saw but could not name" in said, said
    assert report["sweep"]["unnamed_seen"] == {
        "after_send by requests/api:post > urllib3/connection:getresponse": 2,
        "before_send by requests/api:post > urllib3/connection:putrequest": 2,
    }, report["sweep"]
    baseline = report["cases"][0]
    assert baseline["unnamed_points"] == report["sweep"]["unnamed_seen"]
    assert status in (0, 1), said


def test_how_often_a_librarys_pollers_committed_is_no_part_of_a_runs_content() -> None:
    """DBOS's queue and scheduler threads commit as the wall clock has them: two runs of one
    seed may see one poll more or less, present or not, and must still read alike."""
    from harness.engine.search.determinism import content, first_difference

    one = {"cases": [{"id": "baseline", "unnamed_points": {"after_commit by dbos/_queue:x": 2}}]}
    other: dict[str, object] = {"cases": [{"id": "baseline"}], "sweep": {"unnamed_seen": {}}}
    assert first_difference(content(one), content({"cases": [{"id": "baseline"}]})) is None
    assert content(other) == {"cases": [{"id": "baseline"}], "sweep": {}}
