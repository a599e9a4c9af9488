"""``certify --system-cmd`` judges a program by what the provider saw and by the boundaries
its dry run reached: never by the reference's tables and its eleven boundaries, which an
unknown program does not have (that gave a correct worker "6 of 6 silently lost")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests._cli import run_harness

#: a program that takes its work from jobs(), retries a failed post with the same key, and
#: marks the one point a restart must survive; ``{record}`` decides whether it remembers
PROGRAM = """
import requests
from harness import boundary, jobs, WorkerConfig

config = WorkerConfig.from_env()
for job in list(jobs(config)):
    for attempt in range(3):
        try:
            reply = requests.post(job.url, json=job.message, headers=job.headers, timeout=5)
        except requests.ConnectionError:
            continue
        if reply.status_code < 500:
            break
    {mark}
"""


def _certify(tmp_path: Path, source: str, *extra: str) -> tuple[int, str, dict[str, Any]]:
    (tmp_path / "prog.py").write_text(source)
    return run_harness(
        tmp_path,
        tmp_path,
        *("certify", "--system-cmd", "python prog.py", "--seed", "4", *extra),
        timeout=300,
    )


def _planned(report: dict[str, Any]) -> list[str]:
    """The certify's planned cases, without its seeded depth-2 sample (each of which is a
    second crash after one of them)."""
    sampled = report.get("recovery_sample", {}).get("cases", [])
    assert all("+" in case for case in sampled), sampled
    return [c["id"] for c in report["cases"] if c["id"] not in sampled]


def test_a_correct_program_passes_on_the_boundaries_it_has(tmp_path: Path) -> None:
    status, said, report = _certify(
        tmp_path, PROGRAM.format(mark='boundary("after_provider_accept")'), "--no-discover"
    )
    assert status == 0, said
    assert "dry run reached: after_provider_accept" in said, said
    assert _planned(report) == [
        "baseline",
        "crash@after_provider_accept#1",
        "crash@accepted.payments#1",  # the far-side point its dry run found
    ]
    assert report["summary"]["boundaries_documented"] == 2
    assert report["summary"]["invariants_violated"] == []
    ledger = report["cases"][0]["invariants"]["no_silent_loss"]
    assert ledger["status"] == "pass", ledger  # decided from the provider's log alone


def test_a_program_that_duplicates_is_caught_by_the_one_invariant_it_breaks(
    tmp_path: Path,
) -> None:
    status, said, report = _certify(
        tmp_path,
        PROGRAM.format(mark='boundary("after_provider_accept")'),
        *("--set", "provider_window_s=0", "--set", "provider_faults=[]"),
    )
    assert status == 1, said
    assert report["summary"]["invariants_violated"] == ["exactly_once_effect"], said


def test_named_boundaries_and_discovered_points_are_crashed_side_by_side(
    tmp_path: Path,
) -> None:
    """A program is certified on its boundary() calls and on the sends the harness found in
    it (on by default for a program): both are boundaries of the plan and of the coverage."""
    status, said, report = _certify(
        tmp_path, PROGRAM.format(mark='boundary("after_provider_accept")')
    )
    assert status == 0, said
    send = (
        PROGRAM.splitlines().index(
            "            reply = requests.post(job.url, json=job.message, headers=job.headers,"
            " timeout=5)"
        )
        + 1
    )  # 1-based
    points = [f"before_send.prog.{send}", f"after_send.prog.{send}"]
    assert f"dry run reached: after_provider_accept, {', '.join(points)}" in said, said
    assert _planned(report) == [
        "baseline",
        "crash@after_provider_accept#1",
        *(f"crash@{p}#1" for p in points),
        "crash@accepted.payments#1",  # the far side of the same send (h/farside)
    ]
    assert report["summary"]["boundaries_documented"] == 4  # with accepted.payments
    assert all(c["crash_fired"] for c in report["cases"][1:]), said


def test_a_program_with_no_boundary_is_certified_at_its_far_side_point(tmp_path: Path) -> None:
    """No ``boundary()`` at all: the requests the provider accepted in the dry run are the
    crash points (``accepted.payments``), and a program that resends with the same key
    passes there."""
    status, said, report = _certify(tmp_path, PROGRAM.format(mark="pass"), "--no-discover")
    assert status == 0, said
    assert "dry run reached: accepted.payments" in said, said
    assert [c["id"] for c in report["cases"]] == ["baseline", "crash@accepted.payments#1"]
    assert [c["landings"][0]["landing"] for c in report["cases"][1:]] == ["landed"]


def test_a_program_that_reaches_nothing_is_a_coverage_gap_not_a_pass(tmp_path: Path) -> None:
    """No boundary and no request the provider accepted: nothing to crash, a gap."""
    status, said, _ = _certify(tmp_path, "import sys\n")
    assert status == 1, said
    assert "dry run reached: no boundary" in said, said
    assert "coverage gap" in said, said
