"""Scenario files: every built-in loads and validates; errors name file, line and key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine.case.campaign import validate_cases
from harness.engine.plan import scenario as scenario_mod
from harness.errors import BadInputError
from harness.names import BOUNDARIES
from harness.systems import resolve

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("path", scenario_mod.builtin_paths(), ids=lambda p: p.stem)
def test_every_builtin_scenario_is_valid(path: Path) -> None:
    """Each built-in loads, names a real system, and its cases use known faults and places."""
    sc = scenario_mod.load(path)
    validate_cases(resolve(sc.system), list(sc.cases))


#: faults no built-in can use, and where each is run instead
NO_BUILTIN = {
    # the reference keeps its queue in its database: no broker to restart; a built-in
    # cannot name the example's worker (examples are not installed with the package)
    "broker_restart": ROOT / "examples" / "redis_queue" / "lossy.toml",
}


def test_builtins_cover_every_boundary_and_fault() -> None:
    """Some built-in scenario crashes at each SPEC boundary and uses each fault we implement
    (a fault no built-in can use is used by the example named for it)."""
    from harness.faults import FAULTS

    loaded = [scenario_mod.load(p) for p in scenario_mod.builtin_paths()]
    boundaries = {s.boundary for sc in loaded for c in sc.cases for s in c.steps if s.boundary}
    faults = {s.fault for sc in loaded for c in sc.cases for s in c.steps}
    assert set(BOUNDARIES) <= boundaries
    assert set(FAULTS) - set(NO_BUILTIN) <= faults
    for fault, path in NO_BUILTIN.items():
        assert fault not in faults, f"{fault} has a built-in now: drop it from NO_BUILTIN"
        used = {s.fault for c in scenario_mod.load(path).cases for s in c.steps}
        assert fault in used, (fault, path)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[scenario]\nsystem = "reference"\n[workloda]\nruns = 1\n',
            r"mine.toml:3: \[workloda\] unknown table; did you mean \[workload\]\?",
        ),
        (
            '[scenario]\nsystem = "reference"\n\n[workload]\nrusn = 2\n',
            r"mine.toml:5: \[workload.rusn\] unknown key; did you mean 'runs'\?",
        ),
        (
            '[scenario]\nsystem = "reference"\n[workload]\nruns = "three"\n',
            r"mine.toml:4: \[workload.runs\] expected int, got 'three'",
        ),
        (
            '[scenario]\nsystem = "reference"\n[cases]\nmode = "list"\nlist = ["crash@x"]\n',
            r"mine.toml:5: \[cases.list\] case step 'crash@x'",
        ),
        (
            '[scenario]\nsystem = "reference"\n[expect]\nviolation = "exactly_once"\n',
            r"mine.toml:4: \[expect.violation\] unknown invariant 'exactly_once'",
        ),
        ("[scenario]\nname = 'x'\n", r"mine.toml:1: \[scenario\] missing key 'system'"),
        (
            '[scenario]\nsystem = "reference"\n[cases]\ncrash_scope = "tree"\n',
            r"mine.toml:4: \[cases.crash_scope\] expected one of worker, process, parent,"
            r" got 'tree'",
        ),
        (
            '[scenario]\nsystem = "reference"\n[settle]\ndeadline_s = 5\n',
            r"mine.toml:3: \[settle\] missing key 'probe'",
        ),
        (
            '[scenario]\nsystem = "reference"\n[settle]\nprobe = "true"\ninterval_s = 0\n',
            r"mine.toml:5: \[settle.interval_s\] expected a number above 0 to 3600 s, found 0",
        ),
        (
            '[scenario]\nsystem = "reference"\nboundaries = ["a"]\n',
            r"mine.toml:3: \[scenario.boundaries\] only a cmd: system takes its boundaries",
        ),
        (
            '[scenario]\nsystem = "cmd:python -m x"\nboundaries = ["a b"]\n',
            r"mine.toml:3: \[scenario.boundaries\] expected a non-empty list of plain names",
        ),
        (
            '[scenario]\nsystem = "reference"\n[worker]\nautojump = 0\n',
            r"mine.toml:4: \[worker.autojump\] expected bool, got 0",
        ),
        (
            '[scenario]\nsystem = "reference"\n[worker]\nlease_s = true\n',
            r"mine.toml:4: \[worker.lease_s\] expected int or float, got True",
        ),
        ("[scenario\n", r"mine.toml: not valid TOML"),
        # numbers the checkers would otherwise be handed (and blame the system for)
        (
            '[scenario]\nsystem = "reference"\n[provider]\nwindow_s = nan\n',
            r"mine.toml:4: \[provider.window_s\] expected a number from 0 to \d+ s, found nan",
        ),
        (
            '[scenario]\nsystem = "reference"\n[worker]\nretry_backoff_s = [1, 1e308]\n',
            r"mine.toml:4: \[worker.retry_backoff_s\] expected numbers from 0 to 86400 s,"
            r" found 1e\+308",
        ),
        (
            '[scenario]\nsystem = "reference"\n[worker]\nrequest_timeout_s = -1\n',
            r"mine.toml:4: \[worker.request_timeout_s\] expected a number above 0 to 3600 s",
        ),
        (
            '[scenario]\nsystem = "reference"\n[worker]\nmax_attempts = 0\n',
            r"mine.toml:4: \[worker.max_attempts\] expected a number from 1 to 1000, found 0",
        ),
        (
            '[scenario]\nsystem = "reference"\nseed = 99999999999999999999\n',
            r"mine.toml:3: \[scenario.seed\] expected a number from 0 to 9223372036854775807",
        ),
        (
            '[scenario]\nsystem = "reference"\n[cases]\nmode = "list"\n'
            'list = ["provider_5xx:99999999999999999999"]\n',
            None,  # parsed; refused with the file named by checked_system (next test)
        ),
    ],
)
def test_malformed_scenarios_name_file_line_and_key(
    tmp_path: Path, text: str, expected: str | None
) -> None:
    """Each kind of mistake is reported with where it is and what was expected."""
    if expected is None:
        scenario_mod.load(_write(tmp_path, text))
        return
    with pytest.raises(BadInputError, match=expected):
        scenario_mod.load(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("provider_5xx:99999999999999999999", r"\[cases.list\] case 'provider_5xx:9+': step"),
        ("concurrent_claim:100000", r"\[cases.list\] case 'concurrent_claim:100000': step"),
        ("crash@nowhere#1", r"\[cases.list\] .*nowhere"),
    ],
)
def test_a_listed_case_the_system_cannot_run_names_the_file(
    tmp_path: Path, case: str, expected: str
) -> None:
    """Checked against the system before anything runs, and reported as the file's error."""
    path = _write(
        tmp_path, f'[scenario]\nsystem = "reference"\n[cases]\nmode = "list"\nlist = ["{case}"]\n'
    )
    with pytest.raises(BadInputError, match=rf"^{re.escape(str(path))}:5: {expected}"):
        scenario_mod.load(path).checked_system()


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("no_such_module_xyz:prep", r"no_such_module_xyz"),
        ("os:sep", r"'os:sep' is not a function"),
    ],
)
def test_a_prepare_that_does_not_import_names_its_own_line(
    tmp_path: Path, ref: str, expected: str
) -> None:
    """The error is the prepare line's (line 3), not the system line above it (line 2)."""
    path = _write(
        tmp_path, f'[scenario]\nsystem = "cmd:true"\nprepare = "{ref}"\nboundaries = ["a"]\n'
    )
    with pytest.raises(BadInputError, match=rf"^{re.escape(str(path))}:3: \[scenario.prepare\] "):
        scenario_mod.load(path).checked_system()
    with pytest.raises(BadInputError, match=expected):
        scenario_mod.load(path).checked_system()


@pytest.mark.parametrize(
    ("system", "ref", "expected"),
    [
        ("cmd:true", "no_such_module_xyz:Ledger", r":3: \[scenario.ledger\] .*no_such_module_xyz"),
        ("cmd:true", "os:sep", r":3: \[scenario.ledger\] .*expected a harness.LedgerAdapter"),
        ("cmd:true", "os", r":3: \[scenario.ledger\] expected module:attr"),
        ("reference", "os:sep", r":3: \[scenario.ledger\] expected module:attr .* cmd: system"),
    ],
)
def test_a_ledger_the_harness_cannot_use_names_its_own_line(
    tmp_path: Path, system: str, ref: str, expected: str
) -> None:
    path = _write(tmp_path, f'[scenario]\nsystem = "{system}"\nledger = "{ref}"\n')
    with pytest.raises(BadInputError, match=expected):
        scenario_mod.load(path).checked_system()


def test_a_file_that_is_not_utf8_or_not_a_file_is_refused(tmp_path: Path) -> None:
    """Non-UTF-8 bytes name their line; a FIFO is refused without blocking on it."""
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[scenario]\nsystem = "reference"\ndescription = "caf\xe9"\n')
    with pytest.raises(BadInputError, match=r"latin1.toml:3: expected UTF-8 text, found byte 0xe9"):
        scenario_mod.load(path)
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match=r"pipe.toml: cannot read scenario: not a regular file"):
        scenario_mod.load(fifo)


@pytest.mark.parametrize(
    ("depth", "said"),
    [(1200, "too deep for the TOML reader"), (300, "301 levels"), (9, "10 levels")],
)
def test_values_nested_too_deep_are_refused_in_one_line(
    depth: int, said: str, tmp_path: Path
) -> None:
    """A 2.4 KB file nested 1,200 levels deep was a RecursionError traceback (found by the
    fuzzer, issue 22); one nested a few hundred deep loaded and recursed later. Both are one
    line naming the file, from the library and from every command."""
    path = tmp_path / "deep.toml"
    path.write_text(
        f'[scenario]\nsystem = "reference"\nmode = "list"\n[cases]\nlist = {"[" * depth}'
        f"{']' * depth}\n"
    )
    with pytest.raises(BadInputError, match=rf"^{re.escape(str(path))}: .*nested {said}") as e:
        scenario_mod.load(path)
    assert "\n" not in str(e.value)
    for args in (["scenarios", "check"], ["run"]):
        ran = subprocess.run(
            [sys.executable, "-m", "harness", *args, str(path), "--report-dir", str(tmp_path)]
            if args == ["run"]
            else [sys.executable, "-m", "harness", *args, str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=ROOT,
        )
        assert ran.returncode == 2, (args, ran.stdout, ran.stderr[-2000:])
        assert f"{path}: arrays or inline tables nested {said}" in ran.stdout + ran.stderr
        assert "Traceback" not in ran.stdout + ran.stderr


def test_users_scenarios_folder_never_shadows_builtins(tmp_path: Path) -> None:
    """A scenarios/ folder in the user's repo with a same-named file is not loaded by name."""
    own = tmp_path / "scenarios"
    own.mkdir()
    (own / "reference-certify.toml").write_text("this is not toml [")
    cwd = Path.cwd()
    try:
        os.chdir(tmp_path)
        found = scenario_mod.resolve_path("reference-certify")
        assert found.parent.resolve() == scenario_mod.builtin_dir().resolve()
        assert scenario_mod.load(found).system == "reference"
        with pytest.raises(BadInputError, match="not valid TOML"):
            scenario_mod.load(scenario_mod.resolve_path("scenarios/reference-certify.toml"))
    finally:
        os.chdir(cwd)


def test_unknown_scenario_name_suggests_builtins() -> None:
    """A mistyped built-in name gets a suggestion."""
    with pytest.raises(BadInputError, match="did you mean reference-certify"):
        scenario_mod.resolve_path("reference-certfy")


def test_scenarios_check_command_reports_each_file(tmp_path: Path) -> None:
    """`scenarios check` exits 2 and names the bad file; good files are ok."""
    bad = _write(
        tmp_path, '[scenario]\nsystem = "reference"\n[cases]\nlist = ["crash@nowhere#1"]\n'
    )
    good = scenario_mod.builtin_dir() / "fault-clock-jump.toml"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "scenarios", "check", str(good), str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert f"ok    {good}" in proc.stdout
    assert "unknown boundary 'nowhere'" in proc.stderr


def test_a_cmd_scenario_declares_its_boundaries_and_tables(tmp_path: Path) -> None:
    """``boundaries`` and ``prepare`` make a cmd: system judged like a simple_system."""
    path = _write(
        tmp_path,
        '[scenario]\nsystem = "cmd:python -m examples.rq_worker.buggy"\n'
        'boundaries = ["after_enqueue", "job_started"]\n'
        'prepare = "examples.rq_worker.app:prepare"\n'
        '[cases]\ncrash_scope = "process"\n'
        '[settle]\nprobe = "examples.rq_worker.app:pending"\ndeadline_s = 4\n',
    )
    sc = scenario_mod.load(path)
    system = sc.build_system()
    assert system.boundaries == ("after_enqueue", "job_started")
    assert system.name == "cmd:python -m examples.rq_worker.buggy"
    assert sc.crash_scope == "process"
    assert sc.settle is not None
    assert (sc.settle.deadline_s, sc.settle.interval_s) == (4.0, 0.5)


def test_a_cmd_scenario_with_tables_and_no_boundaries_is_discovered(tmp_path: Path) -> None:
    """``prepare`` without ``boundaries``: a program with tables of its own and no
    ``boundary()`` call, crashed at the sends and commits its dry run makes; the tables are
    still made, and no ledger adapter means the ledger is not judged. A Python system is
    refused a ``prepare``: it brings its own."""
    path = _write(
        tmp_path,
        '[scenario]\nsystem = "cmd:python -m examples.rq_worker.buggy"\n'
        'prepare = "examples.rq_worker.app:prepare"\n',
    )
    system = scenario_mod.load(path).build_system()
    assert system.boundaries == ()
    assert system.discover is True
    assert system.intent is not None  # the user's prepare runs as the case's intent step
    wrong = _write(tmp_path, '[scenario]\nsystem = "reference"\nprepare = "x:y"\n')
    with pytest.raises(scenario_mod.ScenarioError, match=r"\[scenario\.prepare\].*cmd: system"):
        scenario_mod.load(wrong)


def test_campaign_fields_carry_every_setting_a_scenario_fixes() -> None:
    """The CLI and the pytest plugin build settings from one mapping: a preset scenario run
    through the plugin talks to its preset, with its crash scope and settle rules."""
    import dataclasses

    from harness.engine.case.campaign import CampaignSettings

    sc = scenario_mod.load(scenario_mod.resolve_path("preset-chat"))
    fields = sc.campaign_fields()
    assert set(fields) <= {f.name for f in dataclasses.fields(CampaignSettings)}
    assert fields["provider_preset"] == "chat"
    assert {"crash_scope", "settle", "provider_options"} <= set(fields)
    settings = CampaignSettings(system=sc.build_system(), seed=1, **fields)
    assert settings.provider_preset == "chat"
