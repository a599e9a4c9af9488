"""Warm starts (``harness.engine.process._warm``; issue "Real subjects at CI speed", item 1):
a program's libraries are imported once in the harness and each incarnation is forked from
it, yet runs as ``python -m`` would have run it; where a fork cannot reproduce the start, the
program is exec'd and the report says why.

tests/_warm_probe_worker.py notes, before its own imports, whether its library was loaded
ahead and whether its own module was (never), and writes what a fresh interpreter shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.engine.process import _warm
from tests._cli import run_harness
from tests.test_hooks import line_of

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = """\
[scenario]
system = "cmd:python {program}"
env = { DATABASE_URL = "{db.url}", PROBE_OUT = "{db.path}.probe", \
WEBHOOK_URL = "{provider.url}/hooks", WEBHOOK_TOKEN = "{provider.credential}" }
seed = 1

[workload]
runs = 1
destinations_per_topic = 2

[provider]
preset = "webhook"
faults = []

[worker]
max_attempts = 1
"""


def _crash_and_restart(
    tmp_path: Path, program: str = "-m tests._warm_probe_worker", **env: str
) -> tuple[int, str, dict[str, Any], list[dict]]:
    scenario = tmp_path / "probe.toml"
    scenario.write_text(SCENARIO.replace("{program}", program))
    send = line_of((ROOT / "tests" / "_warm_probe_worker.py").read_text(), "SEND")
    case = f"crash@after_send._warm_probe_worker.{send}#1"
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        status, said, report = run_harness(
            ROOT, tmp_path, "run", str(scenario), "--case", case, "--keep-workdir"
        )
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    facts = [
        json.loads(line) for p in tmp_path.rglob("*.probe") for line in p.read_text().splitlines()
    ]
    return status, said, report, facts


@pytest.mark.parametrize(
    ("program", "path0"),
    [("-m tests._warm_probe_worker", ROOT), ("tests/_warm_probe_worker.py", ROOT / "tests")],
    ids=["module", "script"],
)
def test_each_incarnation_is_forked_warm_and_runs_as_python_would(
    tmp_path: Path, program: str, path0: Path
) -> None:
    status, said, report, facts = _crash_and_restart(tmp_path, program)
    assert status == 0, said
    assert report["start"]["warm"] is True, report.get("start")
    assert "warm starts: " in said, said
    started = [f for f in facts if "name" in f]
    # the crashed incarnation and the restart (the dry run's too), each with its library
    # loaded ahead and its own module not
    assert len(started) >= 2, facts
    for each in started:
        assert each["preloaded"] is True, each
        assert each["own_loaded"] is False, each
        assert each["name"] == "__main__"
        assert each["argv"][0].endswith(os.path.join("tests", "_warm_probe_worker.py"))
        assert each["path0"] == str(path0)
        assert each["sigint_default"], each
        assert each["sigpipe_ignored"], each
    # the restart finished its work and exited as an interpreter does: its exit handler ran,
    # the crashed one's did not (SIGKILL)
    exited = {f["atexit"] for f in facts if "atexit" in f}
    assert exited, facts
    assert exited < {f["pid"] for f in started}, facts
    assert len(exited) < len(started), facts


def test_cold_start_when_asked_and_the_report_says_why(tmp_path: Path) -> None:
    status, said, report, facts = _crash_and_restart(tmp_path, **{_warm.COLD_ENV: "1"})
    assert f"cold starts (each incarnation execs the program): {_warm.COLD_ENV} is set" in said
    assert status == 0, said
    assert report["start"] == {"warm": False, "why": f"{_warm.COLD_ENV} is set"}
    started = [f for f in facts if "name" in f]
    assert len(started) >= 2, facts
    assert not any(f["preloaded"] for f in started), facts
    assert all(f["path0"] == str(ROOT) for f in started), facts


# -- what is warm, what is not ---------------------------------------------------------------


def test_a_fork_reproduces_python_m_a_script_and_u_only() -> None:
    py = sys.executable
    assert _warm.parse([py, "-m", "app", "--x"]) == _warm.Launch("app", None, ("--x",))
    assert _warm.parse([py, "-u", "run.py", "a"]) == _warm.Launch(
        None, "run.py", ("a",), unbuffered=True
    )
    assert _warm.parse([py, "-mapp"]) == _warm.Launch("app", None, ())
    assert "-X" in str(_warm.parse([py, "-X", "dev", "-m", "app"]))
    assert "-c" in str(_warm.parse([py, "-c", "pass"]))
    assert "not the harness's interpreter" in str(_warm.parse(["/usr/bin/env", "-m", "app"]))
    assert "interactive" in str(_warm.parse([py]))


def test_only_libraries_are_imported_ahead_never_the_programs_own(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("import json\n")
    (tmp_path / "app" / "main.py").write_text(
        "import colorsys\nfrom . import helper\nfrom .helper import X\n"
        "def later():\n    import wave\n"
    )
    (tmp_path / "app" / "helper.py").write_text("import email.mime.text\nX = 1\n")
    launch = _warm.Launch("app.main", None, ())
    found = _warm.library_imports(launch, [str(tmp_path), *_warm.fresh_interpreter().path])
    assert isinstance(found, list)
    # the package's, the module's and its helper's libraries; not the function's import,
    # and none of the program's own modules
    assert {"json", "colorsys", "email.mime.text"} <= set(found), found
    assert "wave" not in found
    assert not [n for n in found if n.startswith("app")], found
    missing = _warm.library_imports(_warm.Launch("nope", None, ()), [str(tmp_path)])
    assert missing == "no module named 'nope' on the program's path"


def test_what_a_fork_cannot_reproduce_is_exec_d_and_said(tmp_path: Path) -> None:
    ready = _warm.Warmth(warm=True, cwd=os.getcwd(), pythonpath=(), startup_env={})
    assert _warm._unfit(ready, {}) is None
    assert "PYTHONHASHSEED" in str(_warm._unfit(ready, {"PYTHONHASHSEED": "0"}))
    assert "LD_PRELOAD" in str(_warm._unfit(ready, {"LD_PRELOAD": "/x/clock.so"}))
    assert "PYTHONPATH" in str(_warm._unfit(ready, {"PYTHONPATH": str(tmp_path)}))
    moved = _warm.Warmth(warm=True, cwd=str(tmp_path), pythonpath=(), startup_env={})
    assert "directory" in str(_warm._unfit(moved, {}))


def test_a_library_that_starts_a_thread_at_import_means_a_cold_start(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"  # a library, as the harness tells one
    site.mkdir()
    (site / "threadlib.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    (tmp_path / "prog.py").write_text("import threadlib\n")
    code = (
        "import sys; from harness.engine.process import _warm;"
        f"print(_warm.warm_up([sys.executable, {str(tmp_path / 'prog.py')!r}]).why)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)])),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "importing threadlib started a thread" in done.stdout, done.stdout


@pytest.mark.parametrize("argv", [["python3.11-not-here", "-m", "x"]])
def test_another_interpreter_is_cold(argv: list[str]) -> None:
    warmth = _warm.warm_up(argv)
    assert warmth.warm is False
    assert "not the harness's interpreter" in warmth.why
