"""Mutated scenario files that load also *run* cleanly: a verdict (exit 0, 1 or 3) or a
one-line refusal naming the file (exit 2), within a bounded time, never a traceback, never
exit 4, and never a failure blamed on the system for a value the harness should have refused.

`tests/test_scenario_fuzz.py` proves that a mutated file is loaded or refused in one line;
this takes the files it loads and runs one of their cases for real (`crash-harness run FILE
--case ID`, a subprocess, real workers and providers), because a value can pass every check
and still break a campaign: an overflowing clock field, a deadline that cannot be met, a
fault size that spins.

A drawn run may also get a hostile worker in place of its file's system (a class of
``tests/_hostile_unintended.py``: the reference, then every delivered message once more under
a made-up run, delivery id and key); whatever else the file says, a case in which the
provider accepted such a second copy never passes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.engine.plan import scenario as scenario_mod
from harness.errors import BadInputError
from tests._hostile_unintended import copies_accepted
from tests.test_scenario_fuzz import BUILTINS, mutated

ROOT = Path(__file__).resolve().parent.parent
#: a run of one case that takes longer than this is spinning, whatever its file says
LIMIT_S = 120.0
#: CI's bounded sample; ``make fuzz`` sets more
EXAMPLES = int(os.environ.get("CRASH_HARNESS_RUN_FUZZ_EXAMPLES", "3"))
#: the hostile workers a drawn run may get in place of the file's system: the second copies
#: with the reference's ledger, and without a ledger adapter (only the providers' logs judge)
HOSTILES = (
    "tests._hostile_unintended:AGAIN_ON_REFERENCE",
    "tests._hostile_unintended:AGAIN_WITHOUT_ADAPTER",
)
#: the lines a hostile run drops: the file's system and what it expects of that system
_SWAPPED = re.compile(rb"^\s*(system|violation|hold)\s*=")
SEEN: Counter[str] = Counter()
SLOWEST: list[float] = [0.0]


def as_hostile(data: bytes, hostile: str) -> bytes:
    """The file with its system swapped for ``hostile`` and its expectations dropped (the
    hostile worker is judged by every invariant, as a system expecting nothing is)."""
    lines = [ln for ln in data.split(b"\n") if not _SWAPPED.match(ln)]
    system = f'system = "{hostile}"'.encode()
    at = next((i for i, ln in enumerate(lines) if ln.strip() == b"[scenario]"), None)
    if at is None:
        return b"\n".join([b"[scenario]", system, *lines])
    return b"\n".join([*lines[: at + 1], system, *lines[at + 1 :]])


@st.composite
def runnable(draw: st.DrawFn, *, hostile: bool = False) -> tuple[str, bytes, str]:
    """A mutated file that loads, and one case id of it to run; ``hostile``: a built-in file
    as it is or mutated, run by one of the ``HOSTILES``."""
    if hostile and draw(st.booleans()):
        path = draw(st.sampled_from(BUILTINS))
        name, data = path.name, path.read_bytes()
    else:
        name, data = draw(mutated())
    if hostile:
        data = as_hostile(data, draw(st.sampled_from(HOSTILES)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            sc = scenario_mod.load(path)
            system = sc.checked_system()
        except BadInputError:
            loaded = False
        else:
            loaded = True
    assume(loaded)
    if sc.mode == "list":
        ids = [c.id for c in sc.cases]
    else:
        ids = ["baseline", *(f"crash@{b}#1" for b in system.boundaries)]
    return name, data, draw(st.sampled_from(ids))


def _blames_the_reference(data: bytes, name: str) -> bool:
    """True when a failed invariant in this run would blame the reference for a value it was
    given: the file runs the reference and expects no violation."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        sc = scenario_mod.load(path)
    return sc.system == "reference" and sc.violation is None


def _run(path: Path, case: str, out: Path) -> tuple[int, str, float]:
    argv = [sys.executable, "-m", "harness", "run", str(path), "--case", case]
    argv += ["--determinism", "0", "--report-dir", str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=out.parent,
        # a kept work dir lands beside the file, and goes with it
        env=dict(os.environ, PYTHONPATH=str(ROOT), CRASH_HARNESS_TMPDIR=str(out.parent)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # let it write its partial report and clean up
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        pytest.fail(f"run {path.name} --case {case} spun past {LIMIT_S}s:\n{output[-3000:]}")
    return proc.returncode, output, time.monotonic() - started


def _runs_cleanly(case: tuple[str, bytes, str]) -> None:
    name, data, case_id = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        status, output, took = _run(path, case_id, Path(tmp) / "reports")
        report_path = Path(tmp) / "reports" / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else None
    SLOWEST[0] = max(SLOWEST[0], took)
    shown = f"{name} --case {case_id} (exit {status}):\n{output[-3000:]}\n--- file ---\n"
    shown += data.decode(errors="replace")
    assert status in (0, 1, 2, 3), shown
    assert "Traceback" not in output, shown
    if report is not None and _blames_the_reference(data, name):
        violated = report["summary"]["invariants_violated"]
        assert violated == [], f"the reference blamed for {violated}: {shown}"
    if status == 2:
        errors = [ln for ln in output.splitlines() if ln.startswith(("error", "Error"))]
        assert errors, shown
        assert str(path) in errors[0], shown
    SEEN[f"exit {status}"] += 1


_fuzz = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)(given(runnable())(_runs_cleanly))


@pytest.mark.timeout(int(EXAMPLES * LIMIT_S + 300))
def test_a_mutated_scenario_that_loads_runs_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    SEEN.clear()
    _fuzz()
    by_status = ", ".join(f"{k}: {v}" for k, v in sorted(SEEN.items()))
    with capsys.disabled():
        print(
            f"\nrun fuzz: {SEEN.total()} mutated files run ({by_status}); slowest"
            f" {SLOWEST[0]:.1f}s; 0 tracebacks, 0 spinning"
        )
    assert SEEN.total() > 0


def _hostile_never_passes(case: tuple[str, bytes, str]) -> None:
    """The run is clean as above, and a case where the provider accepted a second copy under
    made-up ids is never a pass: neither its verdict nor its exit status."""
    name, data, case_id = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        status, output, took = _run(path, case_id, Path(tmp) / "reports")
        report_path = Path(tmp) / "reports" / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else None
    SLOWEST[0] = max(SLOWEST[0], took)
    shown = f"{name} --case {case_id} (exit {status}):\n{output[-3000:]}\n--- file ---\n"
    shown += data.decode(errors="replace")
    assert status in (0, 1, 2, 3), shown
    assert "Traceback" not in output, shown
    copies = sum(copies_accepted(c) for c in report["cases"]) if report is not None else 0
    if copies:
        verdicts = [c["verdict"] for c in report["cases"]]  # type: ignore[index]
        assert "pass" not in verdicts, f"{copies} second copies passed: {shown}"
        assert status != 0, shown
        SEEN["hostile copies sent, not passed"] += 1
    else:
        SEEN[f"no copy sent (exit {status})"] += 1


_hostile_fuzz = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)(given(runnable(hostile=True))(_hostile_never_passes))


@pytest.mark.timeout(int(EXAMPLES * LIMIT_S + 300))
def test_a_drawn_run_of_a_hostile_worker_never_passes(capsys: pytest.CaptureFixture[str]) -> None:
    """Built-in or mutated files, run by a worker that sends each delivered message again
    under made-up ids: no case where a copy was accepted passes."""
    SEEN.clear()
    _hostile_fuzz()
    by_status = ", ".join(f"{k}: {v}" for k, v in sorted(SEEN.items()))
    with capsys.disabled():
        print(f"\nhostile run fuzz: {SEEN.total()} drawn runs ({by_status})")
    assert SEEN.total() > 0
