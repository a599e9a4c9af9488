"""Progress and colour as a user sees them: ``[N/M]`` on every case line and the time taken on
the summary; a live status line and coloured verdicts on a terminal (a real pseudo-terminal),
none of either in a pipe or with ``NO_COLOR``; ``--color`` overrides; explore's heartbeat;
and no report on disk ever carries a colour code."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import _progress, _style
from harness.engine.case.campaign import CaseResult
from harness.engine.plan.schedule import CaseSpec
from harness.engine.results import Landing, StepRecord
from harness.invariants import Status

ROOT = Path(__file__).resolve().parent.parent
GREEN_OK = "\x1b[32mok\x1b[0m"
RED_FAIL = "\x1b[1;31mFAIL\x1b[0m"
ANY_SGR = re.compile(r"\x1b\[[0-9;]*m")
COUNTER = re.compile(r"\d+\.\d\ds  \[\s*(\d+)/(\d+)\]")

TINY_SWEEP = """\
[scenario]
name = "tiny-sweep"
description = "a sweep small enough for a test"
system = "reference"
seed = 1

[workload]
runs = 1
destinations_per_topic = 1

[cases]
mode = "sweep"
"""


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without the colour switches the caller may have set."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", COLUMNS="200", **extra)
    return env


def _run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _run_in_pty(*args: str, cwd: Path, **env: str) -> tuple[int, str]:
    """Run the command with stdin, stdout and stderr on a real pseudo-terminal; everything
    it wrote (the terminal turns each newline into CR LF), and its exit status."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=_env(**env),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return status, b"".join(chunks).decode("utf-8", "replace")


def _reports(report_dir: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(report_dir.iterdir()):
        if path.suffix in (".json", ".md", ".xml", ".html"):
            yield path.name, path.read_text()


def _case_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("  ok ", "  FAIL", "  GAP"))]


# -- piped (CI) ------------------------------------------------------------------------------


def test_piped_certify_counts_cases_and_writes_no_control_character(tmp_path: Path) -> None:
    """In a pipe every case line says [N/M], the summary says how long it took, and neither
    stream has a colour code, a carriage return or a live line; nor has any report."""
    proc = _run(
        *("certify", "--seed", "1", "--case", "baseline", "--case", "crash@after_claim#1"),
        *("--report-dir", "out"),
        cwd=tmp_path,
    )
    lines = _case_lines(proc.stdout)
    assert [COUNTER.search(line).groups() for line in lines if COUNTER.search(line)] == [
        ("1", "2"),
        ("2", "2"),
    ], proc.stdout
    assert "  ok   baseline " in proc.stdout  # the mark still opens the line
    summary = next(line for line in proc.stdout.splitlines() if " passed, " in line)
    assert re.search(r" in \d+\.\ds$", summary), summary
    for stream in (proc.stdout, proc.stderr):
        assert "\x1b" not in stream, repr(stream)
        assert "\r" not in stream, repr(stream)
    for name, text in _reports(tmp_path / "out"):
        assert "\x1b" not in text, name


def test_piped_sweep_counts_against_the_plan_its_dry_run_made(tmp_path: Path) -> None:
    """A sweep knows its plan only after its dry run; the dry run's line already counts
    against the whole plan, and the last line's N is the plan's M."""
    (tmp_path / "tiny.toml").write_text(TINY_SWEEP)
    proc = _run(
        *("sweep", "tiny.toml", "--depth", "1", "--determinism", "0", "--report-dir", "out"),
        cwd=tmp_path,
    )
    counters = [
        (int(m.group(1)), int(m.group(2)))
        for line in _case_lines(proc.stdout)
        if (m := COUNTER.search(line))
    ]
    assert len(counters) > 2, proc.stdout
    total = counters[0][1]
    assert counters == [(n, total) for n in range(1, total + 1)], proc.stdout
    assert re.search(r"\(\d+ case\(s\) in \d+\.\ds\)$", proc.stdout.splitlines()[-2]), proc.stdout
    assert "\x1b" not in proc.stdout + proc.stderr


# -- --color and the environment ------------------------------------------------------------


def test_color_always_paints_a_fail_red_even_in_a_pipe(tmp_path: Path) -> None:
    """--color=always colours through a pipe (click would strip it on its own), beats
    NO_COLOR, and still keeps every report on disk free of colour codes."""
    proc = _run(
        *("--color=always", "certify", "--system", "mutant:new_key_per_attempt"),
        *("--seed", "1", "--case", "baseline", "--report-dir", "out"),
        cwd=tmp_path,
        NO_COLOR="1",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fail = next(line for line in proc.stdout.splitlines() if "baseline" in line)
    assert fail.startswith("  " + RED_FAIL + " baseline"), repr(fail)
    for name, text in _reports(tmp_path / "out"):
        assert "\x1b" not in text, name


def test_color_always_on_the_subcommand_paints_ok_green(tmp_path: Path) -> None:
    """The sub-command takes --color too; a passing case's mark is green."""
    proc = _run(
        *("certify", "--color", "always", "--seed", "1", "--case", "baseline"),
        *("--report-dir", "out"),
        cwd=tmp_path,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: boundaries uncovered
    assert "  " + GREEN_OK + "   baseline" in proc.stdout, repr(proc.stdout)
    assert RED_FAIL not in proc.stdout


@pytest.mark.parametrize(
    ("choice", "env", "tty", "expected"),
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # empty means unset (no-color.org)
        ("auto", {"FORCE_COLOR": "1"}, False, True),
        ("auto", {"FORCE_COLOR": "0"}, False, False),
        ("auto", {"NO_COLOR": "1", "FORCE_COLOR": "1"}, True, False),
        ("auto", {"TERM": "dumb"}, True, False),
        ("always", {"NO_COLOR": "1"}, False, True),  # the flag is the user's latest word
        ("never", {"FORCE_COLOR": "1"}, True, False),
    ],
)
def test_the_colour_rule(
    monkeypatch: pytest.MonkeyPatch,
    choice: _style.ColorChoice,
    env: dict[str, str],
    tty: bool,  # noqa: FBT001  # a parametrized value
    expected: bool,  # noqa: FBT001
) -> None:
    """--color first, then NO_COLOR, then FORCE_COLOR, then whether stdout is a terminal."""

    class Stream:
        def isatty(self) -> bool:
            return tty

    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdout", Stream())
    monkeypatch.setattr(_style, "_choice", choice)
    assert _style.colour_enabled() is expected
    assert (_style.paint("x", _style.RED) != "x") is expected


# -- a real terminal ---------------------------------------------------------------------------


def test_on_a_terminal_verdicts_are_coloured_and_a_live_line_counts_down(tmp_path: Path) -> None:
    """On a pseudo-terminal in auto mode: the ok mark is green, and a status line on stderr
    is drawn in place (erase-to-end-of-line) with N/M, the time and an estimate left."""
    status, out = _run_in_pty(
        *("certify", "--seed", "1", "--case", "baseline", "--case", "crash@after_claim#1"),
        *("--report-dir", "out"),
        cwd=tmp_path,
    )
    assert status in (0, 1), out
    assert GREEN_OK in out, repr(out)
    assert "\x1b[K" in out, repr(out)
    live = re.search(r"\rcertify 1/2 · \d+\.\ds · ~\d+\.\ds left · .*?1 ok.*?\x1b\[K", out)
    assert live, repr(out)
    assert "\rcertify 2/2 · " in out, repr(out)
    # the live line is taken down before the summary: the summary starts a clean line
    assert re.search(r"\r\x1b\[K(\x1b\[[0-9;]*m)?2 passed, ", out), repr(out)


def test_color_never_on_a_terminal_keeps_the_live_line_but_no_colour(tmp_path: Path) -> None:
    """--color=never drops the colour codes; the live line, a terminal matter, stays."""
    status, out = _run_in_pty(
        *("--color=never", "certify", "--seed", "1", "--case", "baseline"),
        *("--report-dir", "out"),
        cwd=tmp_path,
    )
    assert status in (0, 1), out
    assert not ANY_SGR.search(out), repr(out)
    assert re.search(r"\rcertify 1/1 · \d+\.\ds · 1 ok\x1b\[K", out), repr(out)


# -- explore's heartbeat -------------------------------------------------------------------------


def _explore(tmp_path: Path, interval: str) -> subprocess.CompletedProcess[str]:
    return _run(
        *("explore", "reference-explore", "--budget", "2", "--seed", "3"),
        *("--report-dir", "out", "--examples-dir", "examples"),
        cwd=tmp_path,
        CRASH_HARNESS_HEARTBEAT_S=interval,
    )


def test_explore_prints_a_heartbeat_off_a_terminal(tmp_path: Path) -> None:
    """With the interval at 0 every schedule ends with a heartbeat: schedules tried so far,
    how many landed, how many failed; plain text in a pipe."""
    proc = _explore(tmp_path, "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    beats = [line for line in proc.stdout.splitlines() if line.startswith("  ... ")]
    assert len(beats) >= 3, proc.stdout  # the dry run and two drawn schedules
    tried = [int(m.group(1)) for b in beats if (m := re.search(r"(\d+) schedule\(s\) tried", b))]
    assert tried == list(range(1, len(beats) + 1)), beats
    assert all(re.search(r"\d+ landed, 0 failed$", b) for b in beats), beats
    assert "\x1b" not in proc.stdout + proc.stderr


def test_explore_heartbeat_waits_for_its_interval(tmp_path: Path) -> None:
    """An interval longer than the run: no heartbeat at all, and otherwise the same output."""
    proc = _explore(tmp_path, "100000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  ... " not in proc.stdout, proc.stdout
    assert "schedules in " in proc.stdout


def _case(case: str, verdict: Status, *, landed: bool = True) -> CaseResult:
    spec = CaseSpec.parse(case)
    landing = Landing.LANDED if landed else Landing.NOT_REACHED
    return CaseResult(
        spec=spec,
        verdict=verdict,
        invariants={},
        workers=[],
        intended=1,
        accepted=1,
        reached={},
        crash_fired=False,
        notes=[],
        duration_s=0.0,
        replay="",
        step_records=[StepRecord(str(step), landing, "") for step in spec.steps],
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_heartbeat_keeps_the_shortest_failure_and_beats_on_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A heartbeat every interval of the monotonic clock (not per schedule), counting landed
    schedules and failures, naming the shortest failure so far (the first of equals)."""
    monkeypatch.setattr(_style, "_choice", "never")
    clock = _Clock()
    said: list[str] = []
    progress = _progress.Progress("explore", live=False, clock=clock)
    beat = _progress.Heartbeat(progress, interval=5.0, emit=said.append)
    beat.seen(_case("crash@after_claim#1+crash@after_ack#1", Status.FAIL))
    clock.now += 2
    beat.seen(_case("crash@before_retry#1", Status.GAP, landed=False))
    assert said == []  # 2 s of 5
    clock.now += 3.5
    beat.seen(_case("crash@after_claim#1", Status.FAIL))
    clock.now += 1
    beat.seen(_case("crash@after_ack#1", Status.FAIL))  # as short, found later
    assert said == [
        "  ... 5.5s: 3 schedule(s) tried, 2 landed, 2 failed;"
        " shortest failure crash@after_claim#1 (1 step)"
    ]
    assert beat.best is not None
    assert beat.best.spec.id == "crash@after_claim#1"
    assert (beat.failed, progress.done) == (3, 4)


def test_the_live_status_estimates_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """N/M, the verdict counts, the time taken and (elapsed / done) x left as the estimate."""
    monkeypatch.setattr(_style, "_choice", "never")
    clock = _Clock()
    progress = _progress.Progress("sweep", live=False, clock=clock)
    progress.plan(4)
    progress.advance("pass")
    clock.now += 3
    progress.advance("fail")
    assert progress.counter() == "[2/4]"
    assert progress.status() == "sweep 2/4 · 3.0s · ~3.0s left · 1 ok · 1 FAIL"
    progress.plan(6)  # a depth-2 sweep plans its second crashes
    assert progress.counter() == "[ 2/10]"
    assert _progress.duration(187) == "3m07s"


def test_on_a_terminal_explore_shows_its_heartbeat_in_the_live_line(tmp_path: Path) -> None:
    """On a terminal the heartbeat is the live line, redrawn after every schedule: no
    heartbeat lines in the scroll-back, even with the interval at 0."""
    status, out = _run_in_pty(
        *("explore", "reference-explore", "--budget", "2", "--seed", "3"),
        *("--report-dir", "out", "--examples-dir", "examples"),
        cwd=tmp_path,
        CRASH_HARNESS_HEARTBEAT_S="0",
    )
    assert status == 0, out
    tried = re.findall(r"\rexplore: (\d+) schedule\(s\) tried · \d+\.\ds · .*? landed", out)
    assert [int(n) for n in tried] == list(range(1, len(tried) + 1)), repr(out)
    assert len(tried) >= 3, repr(out)
    assert "  ... " not in out, repr(out)


def test_mutants_rows_count_against_the_systems_planned(tmp_path: Path) -> None:
    """Each matrix row says [N/M] of the systems (the reference and each mutant), coloured
    by what it means: a caught mutant and a clean reference are green."""
    proc = _run(
        *("mutants", "--color=always", "--only", "new_key_per_attempt", "--case", "baseline"),
        *("--seed", "1", "--plain"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "fired: " in line]
    assert len(rows) == 2, proc.stdout
    assert rows[0].startswith("  \x1b[32mclean\x1b[0m        reference "), rows
    assert rows[1].startswith("  \x1b[32mcaught\x1b[0m       mutant:new_key_per_attempt "), rows
    assert ["[1/2]" in rows[0], "[2/2]" in rows[1]] == [True, True], rows
    assert re.search(r"^2 system\(s\) in \d+\.\ds$", proc.stdout, re.M), proc.stdout
