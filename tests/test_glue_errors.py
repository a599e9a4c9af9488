"""An exception in the user's own glue is a setup error: one line, their file and line, exit 2.

The glue is what the harness runs in its own process on the user's behalf: a system's
``prepare``, its ``intent``, its ledger adapter (``read_ledger``), the module that defines it.
On 8213f3e each of these ended in a traceback, with exit 4 from ``certify`` and exit 1 (the
"violation found" code) from ``run`` and ``sweep``; a raising adapter read as every
invariant undecided, with no word of why.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine.plan import _glue
from harness.errors import ExitStatus, GlueError

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ROOT / "tests" / "_glue_systems.py"


def _line_of(marker: str) -> int:
    """The line of ``tests/_glue_systems.py`` that carries ``# GLUE-LINE marker``."""
    for number, line in enumerate(SYSTEMS.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# GLUE-LINE {marker}"):
            return number
    raise AssertionError(marker)


def _harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m harness ARGS`` from ``tmp_path``, reports there too."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), CRASH_HARNESS_TMPDIR=str(scratch), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "harness", *args, "--report-dir", str(tmp_path / "reports")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _certify(tmp_path: Path, system: str) -> subprocess.CompletedProcess[str]:
    return _harness(tmp_path, "certify", "--system", system, "--case", "baseline", "--seed", "1")


def _assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, and one ``error:`` line holding every needle; that line."""
    printed = proc.stdout + proc.stderr
    assert proc.returncode == ExitStatus.BAD_INPUT, printed
    assert "Traceback" not in printed, printed
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, printed
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_a_prepare_that_raises_is_a_setup_error_naming_the_users_line(tmp_path: Path) -> None:
    """certify of a system whose prepare raises: exit 2 (8213f3e: 4 and a traceback)."""
    proc = _certify(tmp_path, "tests._glue_systems:PREPARE_RAISES")
    _assert_one_line(
        proc,
        "its prepare raised RuntimeError: orders table template missing",
        f"_glue_systems.py:{_line_of('prepare')} in _prepare_raises",
    )


def test_a_scenario_run_with_raising_glue_exits_2_not_1(tmp_path: Path) -> None:
    """``run`` of a scenario naming that system: exit 2 (8213f3e: exit 1, read as a
    violation, after a traceback)."""
    scenario = tmp_path / "glue.toml"
    scenario.write_text(
        '[scenario]\nname = "glue"\nsystem = "tests._glue_systems:PREPARE_RAISES"\n'
        '[cases]\nmode = "sweep"\n'
    )
    proc = _harness(tmp_path, "run", str(scenario), "--seed", "1")
    _assert_one_line(proc, "RuntimeError", f"_glue_systems.py:{_line_of('prepare')}")


def test_glue_that_raises_in_a_forked_job_is_the_same_setup_error(tmp_path: Path) -> None:
    """A sweep on two jobs whose prepare breaks after the dry run: the job's error reaches
    the command as the same one line and exit 2 (8213f3e: "job 2 failed" and a traceback)."""
    scenario = tmp_path / "glue.toml"
    scenario.write_text(
        '[scenario]\nname = "glue"\nsystem = "tests._glue_systems:PREPARE_RAISES_LATER"\n'
        '[cases]\nmode = "sweep"\n'
    )
    proc = _harness(
        tmp_path, "sweep", str(scenario), "--seed", "1", "--jobs", "2", "--determinism", "0"
    )
    _assert_one_line(proc, "RuntimeError: second case broke", f":{_line_of('later')} in ")


def test_an_adapter_that_raises_is_a_setup_error_not_an_undecided_case(tmp_path: Path) -> None:
    """A read_ledger with a bug (KeyError): exit 2 naming its line (8213f3e: exit 3, every
    invariant undecided and nothing said of the adapter)."""
    proc = _certify(tmp_path, "tests._glue_systems:READ_LEDGER_RAISES")
    _assert_one_line(
        proc, "its read_ledger raised KeyError", f"_glue_systems.py:{_line_of('adapter')}"
    )


def test_a_ledger_the_database_cannot_give_stays_unknown(tmp_path: Path) -> None:
    """A database error reading the ledger is the state the worker left, not a glue bug:
    the case stays unknown (exit 3), as before."""
    proc = _certify(tmp_path, "tests._glue_systems:READ_LEDGER_DATABASE_ERROR")
    assert proc.returncode == ExitStatus.INCONCLUSIVE, proc.stdout + proc.stderr


def test_an_intent_that_raises_is_a_setup_error(tmp_path: Path) -> None:
    """A declared intent whose query raises: exit 2 naming its line."""
    proc = _certify(tmp_path, "tests._glue_systems:INTENT_RAISES")
    _assert_one_line(proc, "its intent raised ValueError", f":{_line_of('intent')} in ")


def test_a_module_that_raises_on_import_is_a_setup_error(tmp_path: Path) -> None:
    """--system naming a module whose own code raises at import: exit 2 naming the module's
    line (8213f3e: exit 4 and a traceback)."""
    (tmp_path / "broken_factory.py").write_text(
        "from harness.systems import resolve\n\nSYSTEM = resolve('reference')\n"
        "raise RuntimeError('factory needs MY_TOKEN')\n"
    )
    proc = _certify(tmp_path, "broken_factory:SYSTEM")
    _assert_one_line(
        proc, "importing 'broken_factory' raised RuntimeError", "broken_factory.py:4 in <module>"
    )


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_failure_of_the_harness_itself_never_exits_as_a_violation(
    tmp_path: Path, command: str
) -> None:
    """An exception nobody expected, in a scenario route: the harness's own failure, exit 4
    with its traceback (8213f3e: the interpreter's exit 1, which CI reads as a violation)."""
    scenario = tmp_path / "glue.toml"
    scenario.write_text(
        '[scenario]\nname = "glue"\nsystem = "tests._glue_systems:HARNESS_FAILS"\n'
        '[cases]\nmode = "sweep"\n'
    )
    proc = _harness(tmp_path, command, str(scenario), "--seed", "1", "--determinism", "0")
    assert proc.returncode == ExitStatus.INTERNAL_ERROR, proc.stdout + proc.stderr
    assert "internal error in crash-harness" in proc.stderr, proc.stderr
    assert "SupervisorError" in proc.stderr, proc.stderr


def test_describe_names_the_deepest_frame_of_the_users_own_files(tmp_path: Path) -> None:
    """A failure deep in an installed library is placed at the user's line that called it,
    and without any user frame at the function's own definition."""

    def users_glue() -> None:
        import json

        json.loads("{not json")

    with pytest.raises(GlueError) as caught:
        _glue.call("its prepare", users_glue)
    said = str(caught.value)
    assert "JSONDecodeError" in said, said
    assert f"{Path(__file__).name}:" in said, said
    assert "in users_glue" in said, said
    assert "json/decoder.py" not in said, said
