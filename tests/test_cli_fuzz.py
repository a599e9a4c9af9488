"""Mutated command lines: exit 0, 1 or 2 (3 when a case could not be decided), a one-line
error on 2, never a traceback and never exit 4 (the harness's own failure).

Hypothesis takes command lines that work and replaces an option's value with a hostile one
(paths under ``/proc`` and ``/dev``, names longer than the file system takes, URLs with options
libpq does not know), drops or repeats a word, adds an option no command has, or runs it with
a hostile scratch setting in the environment (a ``CRASH_HARNESS_TMPDIR`` that does not exist);
each runs in-process. The base command lines run one quick case (``providers serve`` stops as
soon as it is ready), so an accepted mutation is a short real campaign.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_providers import _cli as providers_cli
from harness.cli import main

#: longer than any file name (255) or path (4096) the file system takes
LONG = "a" * 5000
DEEP = "a/" * 2100

#: command lines that work, each a quick campaign or no campaign at all
BASES: tuple[tuple[str, ...], ...] = (
    ("certify", "--case", "baseline", "--seed", "1", "--worker-deadline", "30"),
    ("certify", "--case", "crash@after_claim#1", "--crash-scope", "worker", "--seed", "2"),
    ("run", "boundary-after-claim", "--case", "crash@after_claim#1", "--seed", "1"),
    ("replay", "fault-clock-jump", "--seed", "1", "--case", "clock_jump@before_retry#1"),
    ("report", "tests/fixtures/report_failing.json", "--format", "md"),
    ("scenarios", "check", "scenarios/boundary-after-claim.toml"),
    ("boundaries",),
    (
        "mutants",
        *("--case", "baseline", "--only", "ack_before_send", "--seed", "1"),
        *("--json", "matrix.json", "--worker-deadline", "30"),
    ),
    ("providers", "serve", "--preset", "payments", "--log", "effects.sqlite"),
)
#: paths no command may write, each for a different reason
# (never a path root may create: a fuzzed `mutants --json /nonexistent/x` made /nonexistent,
# and a later test that needs it missing failed on the same machine)
HOSTILE_PATHS = ("/proc/x", "/proc/self/x/y", "/dev/null", "/dev/full", "/etc/hostname/x", LONG)
#: hostile values per option, and for any position
HOSTILE: dict[str, tuple[str, ...]] = {
    "--seed": ("-1", "nan", "99999999999999999999", "x", ""),
    "--worker-deadline": ("nan", "inf", "-1", "0", "1e999", "x"),
    "--db": (
        "sqlite:////dev/null",
        "sqlite://",
        "sqlite:////nonexistent/x.db",
        "sqlite:////proc/x.db",
        "sqlite:////dev/full",
        "sqlite:///" + LONG,
        "sqlite:///" + "a" * 200,  # fits, but not with the suffix each case adds
        "sqlite:///" + DEEP + "x.db",
        "postgresql://u@[::1/t",
        "postgresql://postgres@127.0.0.1:5432/test?bogus=1",
        "postgresql://postgres@127.0.0.1:5432/" + LONG,
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
    "--report-dir": ("/proc/nope", "", DEEP, *HOSTILE_PATHS),
    "--json": ("", *HOSTILE_PATHS),
    "--log": ("", *HOSTILE_PATHS),
    "--jobs": ("0", "-1", "x", "100000"),
    "--shard": ("0/2", "3/2", "x", "1/0", ""),
    "--crash-scope": ("tree", ""),
    "--format": ("pdf", ""),
    "--nope": ("1",),
}
ANYWHERE = ("", "-1", "nan", "x", ":x", "--", "-h", "é", "/dev/null", "/proc/x", LONG)
#: hostile settings in the environment every command reads
HOSTILE_ENV: dict[str, tuple[str, ...]] = {
    "CRASH_HARNESS_TMPDIR": HOSTILE_PATHS,
    "CRASH_HARNESS_KEEP_WORKDIRS": ("0", "x", "-1", LONG),
}


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    """A mutated command line, and (one time in five) a hostile environment setting."""
    argv = draw(argvs())
    env: dict[str, str] = {}
    if draw(st.integers(0, 4)) == 0:
        name = draw(st.sampled_from(sorted(HOSTILE_ENV)))
        env[name] = draw(st.sampled_from(HOSTILE_ENV[name]))
    return argv, env


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    argv = list(draw(st.sampled_from(BASES)))
    how = draw(st.sampled_from(["option", "option", "option", "value", "drop", "double"]))
    if how == "option":
        own = sorted(f for f in HOSTILE if f in argv[:-1])  # the base's own options, mostly
        flag = draw(st.sampled_from(own if own and draw(st.booleans()) else sorted(HOSTILE)))
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


_real_run_provider = providers_cli.run_provider


def _serve_until_ready(**kwargs: Any) -> int:
    """``providers serve`` as it runs, stopped by its own SIGTERM handler once it is ready."""
    announce = kwargs["on_ready"]

    def ready(info: dict[str, Any]) -> None:
        announce(info)
        signal.raise_signal(signal.SIGTERM)  # run_provider's handler shuts the server down

    return _real_run_provider(**{**kwargs, "on_ready": ready})


@contextmanager
def _signals_kept() -> Iterator[None]:
    """The test's own SIGTERM and SIGINT handlers back after a command replaced them."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _exits_cleanly(run: tuple[list[str], dict[str, str]]) -> None:
    argv, env = run
    root = Path(__file__).resolve().parent.parent
    argv = [str(root / a) if a.startswith(("tests/", "scenarios/")) else a for a in argv]
    with tempfile.TemporaryDirectory() as here:
        before = os.getcwd()
        os.chdir(here)  # whatever the command writes (reports, dirs named by a value) goes here
        try:
            with (
                _signals_kept(),
                mock.patch.object(providers_cli, "run_provider", _serve_until_ready),
            ):
                result = CliRunner().invoke(main, argv, env=env)
        finally:
            os.chdir(before)
    argv = [a if len(a) < 100 else f"{a[:20]}...({len(a)})" for a in argv]
    out = result.output
    assert result.exit_code in (0, 1, 2, 3), (argv, env, result.exit_code, out[-2000:])
    assert "Traceback" not in out, (argv, env, out[-2000:])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv,
        env,
        repr(result.exception),
    )
    if result.exit_code == 2:  # one line that says what is wrong, however long the value
        errors = [
            ln
            for ln in out.splitlines()
            if ln.startswith(("error", "Error", "crash-harness providers:"))
        ]
        assert len(errors) == 1, (argv, env, out[-2000:])
    SEEN[int(result.exit_code)] += 1


_fuzz = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)(given(runs())(_exits_cleanly))


def test_a_mutated_command_line_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    SEEN.clear()
    _fuzz()
    by_status = ", ".join(f"exit {k}: {v}" for k, v in sorted(SEEN.items()))
    with capsys.disabled():
        print(f"\ncommand-line fuzz: {SEEN.total()} command lines ({by_status}); 0 tracebacks")
    assert SEEN[2] > 0
