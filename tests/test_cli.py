"""The command as a user runs it: exit statuses, reports on disk, messages that name the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_help_and_version() -> None:
    """-h lists the commands; --version prints the version."""
    runner = CliRunner()
    assert "certify" in runner.invoke(main, ["-h"]).output
    assert "0.1.0" in runner.invoke(main, ["--version"]).output


def test_help_lines_of_lazy_commands_are_the_commands_own() -> None:
    """`--help` shows stored lines for commands it does not import; each is the real one's."""
    import click

    from harness.cli import LAZY_COMMANDS

    ctx = click.Context(main)
    # click's rule for the listing: an 80-column terminal gives a 78-column formatter
    limit = 78 - 6 - max(map(len, main.list_commands(ctx)))
    for name, (_, _, line) in LAZY_COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None, name
        assert command.get_short_help_str(limit) == line, name
    assert sorted(main.list_commands(ctx)) == sorted({*main.commands, *LAZY_COMMANDS})


def test_version_and_help_import_no_command_module() -> None:
    """`--version` and `--help` stay fast: no command module, database or HTTP library."""
    probe = (
        "import sys\n"
        "from harness.cli import main\n"
        "for args in (['--version'], ['--help']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('sqlalchemy', 'requests', 'werkzeug', 'fake_providers',"
        " 'harness.engine.case.campaign', 'harness.cli.scenario', 'matplotlib')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_boundaries_lists_the_eleven() -> None:
    """`boundaries` prints every documented boundary with where it sits."""
    out = CliRunner().invoke(main, ["boundaries"]).output
    assert len(out.strip().splitlines()) == 11
    assert "after_provider_accept" in out


def test_certify_reference_case_exits_0_and_writes_both_reports(tmp_path: Path) -> None:
    """A passing case exits 0 and leaves report.json (v1 contract) and report.md."""
    proc = _run(
        "certify",
        "--seed",
        "5",
        "--case",
        "crash@after_provider_accept#1",
        "--report-dir",
        "out",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["schema"] == "crash-harness/report/v1"
    assert {"seed", "system", "database", "cases", "summary"} <= set(data)
    case = data["cases"][0]
    assert {"id", "fault", "boundary", "hit", "verdict", "invariants", "effects", "replay"} <= set(
        case
    )
    assert set(data["summary"]) >= {
        "cases",
        "passed",
        "failed",
        "unknown",
        "boundaries_documented",
        "boundaries_covered",
    }
    assert "crash@after_provider_accept#1" in (tmp_path / "out" / "report.md").read_text()


def test_mutant_exits_1_naming_the_invariant(tmp_path: Path) -> None:
    """A caught mutant exits 1 and names the broken invariant on the terminal and in the report."""
    proc = _run(
        "certify",
        "--system",
        "mutant:new_key_per_attempt",
        "--seed",
        "5",
        "--case",
        "baseline",
        "--report-dir",
        "out",
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert "stable_idempotency_key" in proc.stdout
    assert "replay: crash-harness certify --system mutant:new_key_per_attempt" in proc.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "stable_idempotency_key" in report["summary"]["invariants_violated"]


def test_replay_command_from_the_report_reproduces_the_failure(tmp_path: Path) -> None:
    """The replay line in a failing report, run as printed, fails the same way."""
    first = _run(
        "certify",
        "--system",
        "mutant:ack_before_send",
        "--seed",
        "9",
        "--case",
        "crash@after_ack#1",
        "--report-dir",
        "a",
        cwd=tmp_path,
    )
    assert first.returncode == 1
    replay = json.loads((tmp_path / "a" / "report.json").read_text())["cases"][0]["replay"]
    args = [*replay.split()[1:], "--report-dir", "b"]
    args = [a.strip("'") for a in args]
    again = _run(*args, cwd=tmp_path)
    assert again.returncode == 1
    verdicts = [
        json.loads((tmp_path / d / "report.json").read_text())["cases"][0]["invariants"][
            "exactly_once_effect"
        ]["status"]
        for d in ("a", "b")
    ]
    assert verdicts == ["fail", "fail"]


def test_worker_dying_on_its_own_exits_3(tmp_path: Path) -> None:
    """Inconclusive (a worker died without being told to) exits 3, with its stderr shown."""
    proc = _run(
        "certify",
        "--system",
        "tests._systems:DIES",
        "--seed",
        "1",
        "--case",
        "baseline",
        "--report-dir",
        "out",
        cwd=tmp_path,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    # one line: what it raised, where in its own code, and the message
    assert "worker w1 raised RuntimeError at " in said, said
    assert "_systems.py:" in said, said
    assert "worker exploded on its own" in said, said


def test_bad_input_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    """Unknown boundary, unknown mutant and unreachable database each exit 2 and say why."""
    unknown = _run("certify", "--case", "crash@after_clam#1", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "unknown boundary 'after_clam'" in unknown.stderr
    assert "after_claim" in unknown.stderr
    mutant = _run("certify", "--system", "mutant:nope", cwd=tmp_path)
    assert mutant.returncode == 2
    assert "known mutants: ack_before_send" in mutant.stderr
    db = _run("certify", "--db", "postgresql://nobody:hunter2@127.0.0.1:1/none", cwd=tmp_path)
    assert db.returncode == 2
    assert "cannot connect to postgresql+psycopg://nobody:***@127.0.0.1:1/none" in db.stderr
    assert "hunter2" not in db.stderr + db.stdout


#: a command line that would run one quick case if its hostile value were let through
_QUICK = ["certify", "--case", "baseline", "--seed", "1"]
#: longer than any name or path the file system takes
_LONG = "a" * 5000


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["certify", "--worker-deadline", "nan"], "'--worker-deadline': expected seconds above 0"),
        (["certify", "--worker-deadline", "-1"], "'--worker-deadline': expected seconds above 0"),
        (["certify", "--seed", "-5"], "'--seed': -5 is not in the range"),
        (["run", "reference-certify", "--seed", "1" + "0" * 20], "'--seed'"),
        (["certify", "--system", ":x"], "--system: ':x' is not module:attr"),
        (
            ["certify", "--db", "sqlite:////nonexistent/x.db"],
            "--db: /nonexistent does not exist (expected a directory)",
        ),
        (["certify", "--db", "sqlite:////dev/null"], "--db: /dev/null exists and is not a regular"),
        (["certify", "--db", "sqlite://"], "--db: a sqlite URL needs a file path"),
        (["certify", "--db", "postgresql://u:pw@[::1/test"], "is not a database URL"),
        (["certify", "--report-dir", "/proc/nope"], "make /proc/nope: cannot write in /proc"),
        (["certify", "--report-dir", "/dev/null"], "--report-dir: /dev/null exists and is not a"),
        (["run", "reference-certify", "--report-dir", "/proc/nope"], "--report-dir: cannot make"),
        (["providers", "serve", "--preset", "payments", "--port", "70000"], "'--port': 70000"),
        # found by the command-line fuzzer (issue 22): root passes every permission check
        ([*_QUICK, "--db", "sqlite:////proc/x.db"], "--db: cannot write in /proc"),
        (
            [*_QUICK, "--db", "postgresql://postgres@127.0.0.1:5432/test?bogus=1"],
            'libpq takes (invalid URI query parameter: "bogus")',
        ),
        ([*_QUICK, "--db", "sqlite:///" + _LONG], f"--db: {_LONG[:60]}... (5000 characters) is"),
        ([*_QUICK, "--db", "sqlite:///" + "a" * 200], "is too long (a name may have at most 255"),
        ([*_QUICK, "--report-dir", _LONG], "--report-dir: aaaa"),
        (
            ["mutants", *_QUICK[1:], "--only", "ack_before_send", "--json", "/proc/m.json"],
            "--json:",
        ),
        (["mutants", *_QUICK[1:], "--only", "ack_before_send", "--json", "/dev/null"], "--json:"),
        (["providers", "serve", "--preset", "payments", "--log", "/proc/x.log"], "log /proc/x.log"),
        (
            ["providers", "serve", "--preset", "payments", "--log", "/dev/null"],
            "not a regular file",
        ),
        (["providers", "serve", "--preset", "payments", "--log", _LONG], "(5000 characters)"),
        (["run", _LONG, "--case", "baseline"], "scenario: cannot use aaaa"),
        (["certify", "--resume", _LONG], "report: cannot use aaaa"),
        (["providers", "serve", "--preset", "payments", "--port", "-1"], "'--port': -1"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_before_anything_runs(
    args: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2, the option named with what was expected and found; no traceback, no case."""
    monkeypatch.chdir(tmp_path)  # a relative path let through writes here, not in the repo
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output[-2000:]
    assert said in result.output, result.output[-2000:]
    assert "Traceback" not in result.output
    assert "pw@" not in result.output  # a password in an unreadable URL is hidden too
    errors = [
        ln
        for ln in result.output.splitlines()
        if ln.lower().startswith("error") or ln.startswith("crash-harness providers:")
    ]
    assert len(errors) == 1, result.output[-2000:]  # one line, however long the value
    assert len(errors[0]) < 400, errors[0]


@pytest.mark.parametrize(
    "args",
    [
        _QUICK,
        ["run", "boundary-after-claim", "--case", "crash@after_claim#1", "--seed", "1"],
        ["mutants", *_QUICK[1:], "--only", "ack_before_send"],
        ["clean"],
    ],
    ids=lambda a: a[0],
)
@pytest.mark.parametrize("where", ["/nonexistent/scratch", "/proc/scratch", "/dev/null"])
def test_a_scratch_dir_that_is_no_folder_is_refused_in_one_line(
    args: list[str], where: str, tmp_path: Path
) -> None:
    """``CRASH_HARNESS_TMPDIR`` naming no folder we may write in: exit 2 naming it, before any
    case runs (was exit 4 with a traceback, or "nothing left behind" from ``clean``)."""
    report = ["--report-dir", str(tmp_path)] if args[0] in ("certify", "run") else []
    result = CliRunner().invoke(main, [*args, *report], env={"CRASH_HARNESS_TMPDIR": where})
    assert result.exit_code == 2, result.output[-2000:]
    assert f"error: CRASH_HARNESS_TMPDIR: {where}" in result.output, result.output[-2000:]
    assert "Traceback" not in result.output
    assert not list(tmp_path.iterdir())  # no report: nothing ran


def test_a_resume_file_that_is_no_report_is_refused(tmp_path: Path) -> None:
    """Non-UTF-8 bytes and a FIFO as ``--resume``: exit 2, never a traceback or a hang."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, said in ((bad, "not UTF-8 text"), (fifo, "not a regular file")):
        result = CliRunner().invoke(main, ["certify", "--resume", str(path)])
        assert result.exit_code == 2, result.output
        assert said in result.output


def test_a_replay_says_so_and_leaves_the_reports_of_the_run_it_replays(tmp_path: Path) -> None:
    """A replay's header names it (not the scenario's mode), and with no --report-dir its
    reports go to reports/replay: the run's own reports/ stay as they were written."""
    first = _run("run", "boundary-after-ack", "--seed", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    written = (tmp_path / "reports" / "report.json").read_bytes()
    case = json.loads(written)["cases"][-1]["id"]
    again = _run("replay", "boundary-after-ack", "--seed", "1", "--case", case, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith("replay boundary-after-ack · "), again.stdout
    # a run of chosen cases of a sweep scenario is a run, not a sweep
    chosen = _run("run", "fault-clock-jump", "--case", case, "--report-dir", "c", cwd=tmp_path)
    assert chosen.stdout.startswith("run fault-clock-jump · "), chosen.stdout
    assert (tmp_path / "reports" / "report.json").read_bytes() == written
    replayed = json.loads((tmp_path / "reports" / "replay" / "report.json").read_text())
    assert [c["id"] for c in replayed["cases"]] == [case]


def test_sweep_runs_only_the_cases_named_with_case(tmp_path: Path) -> None:
    """``sweep --case`` reruns a few cases of a sweep without the whole of it (it was refused:
    no such option); a case at a boundary the system does not have is refused before any
    runs, and --depth with --case is refused as two plans."""
    out = tmp_path / "r"
    args = ["sweep", "boundary-after-claim", "--seed", "1", "--determinism", "0"]
    result = CliRunner().invoke(
        main, [*args, "--case", "crash@after_claim#1", "--report-dir", str(out)]
    )
    assert result.exit_code == 0, result.output[-2000:]
    assert result.output.startswith("sweep boundary-after-claim"), result.output
    report = json.loads((out / "report.json").read_text())
    assert [c["id"] for c in report["cases"]] == ["crash@after_claim#1"]
    assert report["cases"][0]["crash_fired"] is True, report["cases"][0]
    for extra, said in (
        (["--case", "crash@after_clam#1"], "unknown boundary 'after_clam'"),
        (["--case", "crash@after_claim#1", "--depth", "2"], "--depth plans a sweep"),
    ):
        bad = CliRunner().invoke(main, [*args, *extra, "--report-dir", str(tmp_path / "x")])
        assert bad.exit_code == 2, bad.output[-2000:]
        assert said in bad.output, bad.output
