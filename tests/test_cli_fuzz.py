"""Mutated command lines: exit 0, 1 or 2 (3 when a case could not be decided), a one-line
error on 2, never a traceback and never exit 4 (the harness's own failure).

Hypothesis takes command lines that work and replaces an option's value with a hostile one,
drops or repeats a word, or adds an option no command has; each runs in-process. The base
command lines run one quick case, so an accepted mutation is a short real campaign.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main

#: command lines that work, each a quick campaign or no campaign at all
BASES: tuple[tuple[str, ...], ...] = (
    ("certify", "--case", "baseline", "--seed", "1", "--worker-deadline", "30"),
    ("certify", "--case", "crash@after_claim#1", "--crash-scope", "worker", "--seed", "2"),
    ("run", "boundary-after-claim", "--case", "crash@after_claim#1", "--seed", "1"),
    ("replay", "fault-clock-jump", "--seed", "1", "--case", "clock_jump@before_retry#1"),
    ("report", "tests/fixtures/report_failing.json", "--format", "md"),
    ("scenarios", "check", "scenarios/boundary-after-claim.toml"),
    ("boundaries",),
)
#: hostile values per option, and for any position
HOSTILE: dict[str, tuple[str, ...]] = {
    "--seed": ("-1", "nan", "99999999999999999999", "x", ""),
    "--worker-deadline": ("nan", "inf", "-1", "0", "1e999", "x"),
    "--db": (
        "sqlite:////dev/null",
        "sqlite://",
        "sqlite:////nonexistent/x.db",
        "postgresql://u@[::1/t",
        "x",
        ":memory:",
    ),
    "--system": (":x", "a:b:c", "mutant:nope", "cmd:", "", "nope", "tests._systems:NOPE"),
    "--case": (
        "crash@after_claim#0",
        "crash@nowhere#1",
        "provider_5xx:nan",
        "concurrent_claim:100",
        "clock_jump@before_retry#1:-3d",
        "",
        "crash@after_claim#1:5",
    ),
    "--report-dir": ("/proc/nope", "/dev/null", ""),
    "--jobs": ("0", "-1", "x", "100000"),
    "--shard": ("0/2", "3/2", "x", "1/0", ""),
    "--crash-scope": ("tree", ""),
    "--format": ("pdf", ""),
    "--nope": ("1",),
}
ANYWHERE = ("", "-1", "nan", "x", ":x", "--", "-h", "é", "/dev/null")


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    argv = list(draw(st.sampled_from(BASES)))
    how = draw(st.sampled_from(["option", "option", "option", "value", "drop", "double"]))
    if how == "option":
        flag = draw(st.sampled_from(sorted(HOSTILE)))
        value = draw(st.sampled_from(HOSTILE[flag]))
        if flag in argv[:-1]:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    elif how == "value" and len(argv) > 1:
        argv[draw(st.integers(1, len(argv) - 1))] = draw(st.sampled_from(ANYWHERE))
    elif how == "drop" and len(argv) > 1:
        del argv[draw(st.integers(1, len(argv) - 1))]
    else:
        i = draw(st.integers(0, len(argv) - 1))
        argv.insert(i, argv[i])
    return argv


#: CI's bounded sample; ``make fuzz`` sets more
EXAMPLES = int(os.environ.get("CRASH_HARNESS_FUZZ_EXAMPLES", "150"))
SEEN: Counter[int] = Counter()


def _exits_cleanly(argv: list[str]) -> None:
    root = Path(__file__).resolve().parent.parent
    argv = [str(root / a) if a.startswith(("tests/", "scenarios/")) else a for a in argv]
    with tempfile.TemporaryDirectory() as here:
        before = os.getcwd()
        os.chdir(here)  # whatever the command writes (reports, dirs named by a value) goes here
        try:
            result = CliRunner().invoke(main, argv)
        finally:
            os.chdir(before)
    out = result.output
    assert result.exit_code in (0, 1, 2, 3), (argv, result.exit_code, out[-2000:])
    assert "Traceback" not in out, (argv, out[-2000:])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv,
        repr(result.exception),
    )
    if result.exit_code == 2:
        errors = [ln for ln in out.splitlines() if ln.startswith(("error", "Error"))]
        assert errors, (argv, out[-2000:])
    SEEN[int(result.exit_code)] += 1


_fuzz = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)(given(argvs())(_exits_cleanly))


def test_a_mutated_command_line_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    SEEN.clear()
    _fuzz()
    by_status = ", ".join(f"exit {k}: {v}" for k, v in sorted(SEEN.items()))
    with capsys.disabled():
        print(f"\ncommand-line fuzz: {SEEN.total()} command lines ({by_status}); 0 tracebacks")
    assert SEEN[2] > 0
