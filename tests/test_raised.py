"""A worker that dies by raising is reported in one line: the exception, the frame of the
worker's own code it came from, and the provider fault it did not survive; the traceback stays
in the report, not on the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.engine.case import _raised

ROOT = Path(__file__).resolve().parent.parent


def test_the_innermost_frame_of_the_workers_own_code_is_named(tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text("import json\n\n\ndef main():\n    json.loads('not json')\n\n\nmain()\n")
    proc = subprocess.run([sys.executable, str(worker)], capture_output=True, text=True)
    assert "Traceback" in proc.stderr  # a real one, with library frames below the worker's
    raised = _raised.parse(proc.stderr)
    assert raised is not None
    assert raised.exception == "json.decoder.JSONDecodeError"
    assert raised.where == f"{worker}:5 in main"
    assert _raised.parse("worker w1 said goodbye\n") is None


def test_a_tail_cut_inside_a_framework_s_long_traceback_still_names_the_raise(
    tmp_path: Path,
) -> None:
    """The report keeps the last 4,000 bytes of stderr: a tool raising under LangGraph has
    its "Traceback" header far above that, and a note ("During task with name 'tools'")
    after the exception. The one line is still given, with the worker's own frame."""
    worker = tmp_path / "agent.py"
    library = tmp_path / "site-packages" / "framework.py"  # eighty frames of "a framework"
    library.parent.mkdir()
    library.write_text(
        "".join(f"def f{n}(call):\n    return f{n + 1}(call)\n\n" for n in range(80))
        + "def f80(call):\n    return call()\n"
    )
    worker.write_text(
        "import json\nimport sys\n\n\ndef tool():\n    json.loads('not json')\n\n\n"
        f"sys.path.insert(0, {str(library.parent)!r})\nimport framework\n\n"
        "try:\n    framework.f0(tool)\nexcept Exception as e:\n"
        "    e.add_note(\"During task with name 'tools' and id 'x'\")\n    raise\n"
    )
    proc = subprocess.run([sys.executable, str(worker)], capture_output=True, text=True)
    tail = proc.stderr[-4000:]
    assert "Traceback (most recent" not in tail  # the header was cut off
    raised = _raised.parse(tail)
    assert raised is not None
    assert raised.exception == "json.decoder.JSONDecodeError"
    assert raised.where == f"{worker}:6 in tool"


def test_a_naive_worker_that_raises_on_a_dropped_reply_gets_one_line(tmp_path: Path) -> None:
    outbox = ROOT / "examples" / "outbox"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify", "--system", "outbox_worker:SYSTEM"),
            *("--seed", "1", "--case", "baseline", "--report-dir", str(tmp_path / "r")),
        ],
        cwd=outbox,
        env=dict(os.environ, PYTHONPATH=f"{ROOT}:{outbox}", CRASH_HARNESS_TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said  # inconclusive: the worker died on its own
    assert "worker w1 raised requests.exceptions.ConnectionError at " in said, said
    assert "outbox_worker.py:17 in main" in said, said
    assert "did not survive a dropped reply to " in said, said
    assert "Traceback" not in said, said
    assert "died with exit code" not in said, said
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (case,) = report["cases"]
    assert "Traceback" in case["workers"][0]["stderr_tail"]  # kept where a person can read it
    assert report["summary"]["invariants_violated"] == []  # a death is not a failure
