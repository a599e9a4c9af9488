"""What ``[worker] fake_time`` moves, measured in a real child process under libfaketime.

The child prints its readings on request; the test moves the offset file between requests,
as the harness does while a worker runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.engine.process import _faketime
from harness.errors import BadInputError
from tests._services import needs_libfaketime

#: answers one line per line read on stdin: its clocks, and how long a 0.2 s wait and a
#: 0.1 s sleep took (a sleep failed with EINVAL beside libfaketime without the shim)
CHILD = """
import datetime, json, sys, threading, time
for line in sys.stdin:
    began = time.perf_counter()
    threading.Event().wait(0.2)
    time.sleep(0.1)
    waited = time.perf_counter() - began
    print(json.dumps({
        "time": time.time(),
        "datetime": datetime.datetime.now().timestamp(),
        "monotonic": time.monotonic(),
        "waited": waited,
    }), flush=True)
"""


@needs_libfaketime
def test_a_child_under_fake_time_follows_the_offset_file_while_it_runs(tmp_path: Path) -> None:
    offset = tmp_path / _faketime.OFFSET_FILE
    _faketime.write_offset(offset, 0)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**os.environ, **_faketime.environment(str(offset))},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None

    def ask() -> dict[str, float]:
        assert child.stdin is not None
        assert child.stdout is not None
        sent, sent_mono = time.time(), time.monotonic()
        child.stdin.write("\n")
        child.stdin.flush()
        reading: dict[str, float] = json.loads(child.stdout.readline())
        # the child read its clocks between these (orderings, not durations: load only
        # widens the bracket)
        reading.update(sent=sent, real=time.time(), sent_mono=sent_mono, mono=time.monotonic())
        return reading

    try:
        before = ask()
        _faketime.write_offset(offset, 3600)
        after = ask()
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    slack = 1.0  # the fake clock's granularity (whole seconds at worst), not a duration
    assert before["sent"] - slack <= before["time"] <= before["real"] + slack, before
    # wall time (time.time, datetime.now) is an hour ahead as soon as the file says so
    for clock in ("time", "datetime"):
        assert after["sent"] + 3600 - slack <= after[clock] <= after["real"] + 3600 + slack, after
    # monotonic is left alone (CLOCK_MONOTONIC is the machine's, so the child's reading lies
    # between ours), so timed waits last what they say: a faked one made every Event.wait
    # last as long as the offset
    for reading in (before, after):
        assert reading["sent_mono"] <= reading["monotonic"] <= reading["mono"], reading
    assert after["waited"] > 0.29, after  # waited (a sleep failed with EINVAL returned at once)


def test_a_missing_library_is_named_with_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(_faketime.LIBRARY_ENV, str(tmp_path / "nope.so"))
    with pytest.raises(BadInputError, match=r"nope\.so"):
        _faketime.library()
    monkeypatch.delenv(_faketime.LIBRARY_ENV)
    monkeypatch.setattr(_faketime, "_CANDIDATES", (str(tmp_path / "absent.so"),))
    with pytest.raises(BadInputError, match="apt-get install faketime"):
        _faketime.library()
