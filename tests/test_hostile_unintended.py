"""A worker that sends each message once as intended and once more to the same recipient
under a made-up run id, delivery id and key fails, naming the recipient and
``no_unintended_effect``, never a pass.

Red on 8213f3e: ``certify --case baseline`` of ``AGAIN_UNDER_NEW_IDS`` said ``ok baseline``,
exit 0, with 6 intended and 12 accepted in its own report: no count looked at an accepted
effect outside the intended (run, recipient) pairs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.reports._contract import schema_errors
from tests._hostile_unintended import made_up

ROOT = Path(__file__).resolve().parent.parent


def _certify(tmp_path: Path, system: str) -> tuple[int, str, dict[str, Any]]:
    """``certify --case baseline`` of ``system`` as a user runs it: (exit, output, report)."""
    out = tmp_path / "reports"
    scratch = tmp_path / "scratch"  # a kept work dir stays here, pruning nobody else's
    scratch.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), CRASH_HARNESS_TMPDIR=str(scratch))
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify", "--system", system),
            *("--case", "baseline", "--seed", "1", "--report-dir", str(out)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, json.loads((out / "report.json").read_text())


def test_a_second_message_under_made_up_ids_fails_naming_the_recipient(tmp_path: Path) -> None:
    """A user's own worker (no ledger adapter: only the providers' logs judge it): exit 1,
    no_unintended_effect failed on the console and in every report, each recipient named,
    each second copy listed with its made-up ids; the report counts 6 intended, 12 accepted,
    6 on intended deliveries and 6 unintended, and still matches the v1 schema."""
    code, printed, report = _certify(tmp_path, "tests._hostile_unintended:AGAIN_UNDER_NEW_IDS")
    assert code == 1, printed
    assert "no_unintended_effect" in printed
    (case,) = report["cases"]
    assert case["verdict"] == "fail", case
    assert case["effects"]["intended"] == 6, case["effects"]
    assert case["effects"]["accepted"] == 12, case["effects"]
    assert case["effects"]["on_intended"] == 6, case["effects"]
    assert case["effects"]["unintended"] == 6, case["effects"]
    judged = case["invariants"]["no_unintended_effect"]
    assert judged["status"] == "fail", judged
    assert case["invariants"]["exactly_once_effect"]["status"] == "pass"  # one per pair
    unintended = judged["evidence"]["unintended"]
    assert len(unintended) == 6
    for effect in unintended:
        recipient = effect["destination"]
        assert recipient in judged["summary"]
        assert f"{recipient} (" in printed  # the console names who got the second message
        assert effect["provider"] == "payments"
        assert isinstance(effect["seq"], int)
        intended_runs = effect["intended_runs_for_recipient"]
        assert effect["run_id"] not in intended_runs
        real = _delivery_ids(intended_runs, recipient)  # the worker's own ids came from these
        assert effect["run_id"] in {made_up("run", d) for d in real}
        assert effect["delivery_id"] in {made_up("dlv", d) for d in real}
        assert effect["idempotency_key"] in {made_up("key", d) for d in real}
    assert report["summary"]["invariants_violated"] == ["no_unintended_effect"]
    assert schema_errors(report) == []
    markdown = (tmp_path / "reports" / "report.md").read_text()
    assert "12/6 (6 unintended)" in markdown
    assert unintended[0]["destination"] in markdown


def _delivery_ids(runs: list[str], destination: str) -> list[str]:
    from harness.identities import delivery_id_for

    return [delivery_id_for(run, destination) for run in runs]


def test_the_reference_sending_again_under_made_up_ids_fails_the_new_invariant(
    tmp_path: Path,
) -> None:
    """The reference, then every delivered row once more under made-up ids: besides what its
    ledger already gives away, no_unintended_effect names the second copies."""
    code, printed, report = _certify(tmp_path, "tests._hostile_unintended:AGAIN_ON_REFERENCE")
    assert code == 1, printed
    (case,) = report["cases"]
    judged = case["invariants"]["no_unintended_effect"]
    assert judged["status"] == "fail", judged
    assert judged["evidence"]["unintended_count"] == case["effects"]["unintended"] > 0
