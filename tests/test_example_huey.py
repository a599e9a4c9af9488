"""``examples/huey_worker``: a Huey consumer in process mode, as it ships, crashed at the
sends and commits the harness discovers in it.

Huey takes a task off its queue (a committed ``DELETE``) before it runs it, so a crash
between the two loses the webhook for good. Its scheduler process commits once a second
while idle, each commit a discovered point's hit: counted as activity, the restarted
worker never went quiet, the case ran to the 30 s settle deadline and read ``liveness``
failed with the loss itself left undecided. An idle poll (a commit that changed no row) is
not activity: the case settles on quiet and reads ``no_silent_loss`` (#36)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._cli import run_harness

pytest.importorskip("huey")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "huey_worker"


def _line(marker: str) -> int:
    """The line of worker.py that starts with ``marker`` (stripped)."""
    lines = (EXAMPLE / "worker.py").read_text().splitlines()
    (found,) = [n for n, line in enumerate(lines, 1) if line.strip().startswith(marker)]
    return found


def test_the_huey_worker_imports_nothing_of_the_harness() -> None:
    source = (EXAMPLE / "worker.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+(harness|crash_harness)\b", source, re.M)
    assert not re.search(r"\bboundary\(", source)


def test_a_lost_task_settles_on_quiet_and_reads_no_silent_loss_not_liveness(
    tmp_path: Path,
) -> None:
    """The crash before the send (Huey has already taken the task off its queue): the
    restarted consumer has nothing to do, its scheduler polls once a second (idle commits,
    traced as hits marked ``changed: false``), the case settles on quiet and fails
    ``no_silent_loss`` alone. Red with idle polls counted as activity: the case runs to the
    settle deadline and fails ``liveness``, ``no_silent_loss`` undecided. The crash after
    the send is the reference: delivered, it settles on the receiver's log and passes."""
    send = _line("requests.post(")
    lost, sent = f"crash@before_send.worker.{send}#1", f"crash@after_send.worker.{send}#1"
    status, said, report = run_harness(
        ROOT,
        tmp_path,
        *("sweep", "examples/huey_worker/naive.toml", "--determinism", "0"),
        *("--case", lost, "--case", sent),
    )
    assert status == 1, said
    cases = {c["id"]: c for c in report["cases"]}
    assert set(cases) == {lost, sent}, said

    case = cases[lost]
    failed = {name for name, inv in case["invariants"].items() if inv["status"] == "fail"}
    assert (case["verdict"], failed) == ("fail", {"no_silent_loss"}), said
    assert case["invariants"]["liveness"]["status"] == "pass", case["invariants"]["liveness"]
    restarted = case["workers"][-1]
    assert restarted["worker"] != case["workers"][0]["worker"]
    assert "settled: nothing happened for" in (restarted["note"] or ""), restarted
    idle = [
        t
        for t in case["timeline"]
        if t["lane"] == restarted["worker"]
        and t["kind"] == "hit"
        and t["detail"].get("changed") is False
    ]
    assert idle, "the restarted consumer made no idle poll: the test shows nothing"
    assert any(t["label"].startswith("after_commit.worker.") for t in idle), idle

    case = cases[sent]
    assert case["verdict"] == "pass", said
    assert "settled: the provider accepted every intended delivery" in (
        case["workers"][-1]["note"] or ""
    )
