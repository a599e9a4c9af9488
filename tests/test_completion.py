"""Shell completion as a shell drives it: click's ``_CRASH_HARNESS_COMPLETE`` protocol in a
fresh process, as on every Tab press, offering the names a user would otherwise look up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import _complete
from harness.names import BOUNDARIES

ROOT = Path(__file__).resolve().parent.parent


def _complete_words(*words: str, shell: str = "bash") -> list[str]:
    """What completing the last of ``words`` (after ``crash-harness``) offers, as values."""
    line = ["crash-harness", *words]
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        _CRASH_HARNESS_COMPLETE=f"{shell}_complete",
        COMP_WORDS=" ".join(line),
        COMP_CWORD=str(len(line) - 1),
    )
    proc = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main(prog_name='crash-harness')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # bash: one "type,value" line per item
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


def test_commands_complete() -> None:
    """The lazy commands are offered by name."""
    offered = _complete_words("ce")
    assert offered == ["certify"]
    assert {"run", "sweep", "report", "completion", "clean"} <= set(_complete_words(""))


def test_scenario_names_complete_for_run_sweep_replay_explore() -> None:
    for command in ("run", "sweep", "replay", "explore"):
        offered = _complete_words(command, "mutant-no")
        assert offered == ["mutant-no-lease", "mutant-no-watchdog"], command
    assert "fault-clock-jump" in _complete_words("run", "")


def test_a_path_completes_as_a_file() -> None:
    """Something that looks like a path falls back to the shell's own file completion."""
    line = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main(prog_name='crash-harness')"],
        env=dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            _CRASH_HARNESS_COMPLETE="bash_complete",
            COMP_WORDS="crash-harness run scenarios/",
            COMP_CWORD="2",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "file,scenarios/" in line.splitlines()


def test_system_values_complete() -> None:
    assert _complete_words("certify", "--system", "ref") == ["reference"]
    offered = _complete_words("certify", "--system", "mutant:")
    assert "mutant:new_key_per_attempt" in offered
    assert all(v.startswith("mutant:") for v in offered)


def test_case_ids_complete() -> None:
    offered = _complete_words("certify", "--case", "crash@after_c")
    assert offered == ["crash@after_claim#1", "crash@after_cleanup#1"]
    assert "baseline" in _complete_words("certify", "--case", "")
    assert "provider_5xx" in _complete_words("run", "fault-provider-faults", "--case", "prov")
    # the next step of a schedule keeps what came before the '+'
    offered = _complete_words("replay", "x", "--case", "crash@after_claim#1+crash@before_rec")
    assert offered == ["crash@after_claim#1+crash@before_reconcile#1"]


def test_mutant_names_complete_for_only() -> None:
    assert _complete_words("mutants", "--only", "ack") == ["ack_before_send"]


@pytest.mark.parametrize("shell", _complete.SHELLS)
def test_completion_prints_each_shells_script(shell: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "completion", shell],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "_CRASH_HARNESS_COMPLETE" in proc.stdout
    assert "crash-harness" in proc.stdout


def test_zsh_gets_the_names_too() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main(prog_name='crash-harness')"],
        env=dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            _CRASH_HARNESS_COMPLETE="zsh_complete",
            COMP_WORDS="crash-harness run mutant-no-l",
            COMP_CWORD="2",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "mutant-no-lease" in proc.stdout


def test_the_lists_are_the_engines_own() -> None:
    """The cheap lists (files, a table) agree with what the engine would import."""
    from harness.engine.plan import scenario
    from harness.faults import FAULTS
    from harness.mutants import CATALOGUE

    assert _complete.scenario_names() == sorted(p.stem for p in scenario.builtin_paths())
    assert _complete.mutant_names() == sorted(CATALOGUE)
    assert {k: v.needs_boundary for k, v in FAULTS.items()} == _complete.FAULT_KINDS
    ids = _complete.case_ids()
    assert {f"crash@{b}#1" for b in BOUNDARIES} <= set(ids)


def test_completing_imports_no_engine() -> None:
    """A Tab press must answer quickly: no database, provider or campaign module."""
    probe = (
        "import sys\n"
        "from harness.cli import main\n"
        "try:\n"
        "    main(prog_name='crash-harness')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('sqlalchemy', 'requests', 'werkzeug', 'harness.engine.case.campaign',"
        " 'harness.faults', 'harness.mutants')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env=dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            _CRASH_HARNESS_COMPLETE="bash_complete",
            COMP_WORDS="crash-harness certify --system mutant:",
            COMP_CWORD="3",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
