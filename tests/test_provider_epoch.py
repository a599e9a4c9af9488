"""A worker cannot hide a duplicate by resetting the provider: the harness judges the epoch
it opened for the case, by number; an epoch change it did not make keeps the case from
passing; and no secret of the provider (admin token, credentials) travels in an environment
a worker can read (``/proc/<pid>/environ`` keeps a process's initial environment for life).

Red on 05909b5: there the provider got its admin token in its environment, the hostile
worker read it from ``/proc/<provider pid>/environ``, reset the epoch, and the case passed
(exit 0) with 12 fresh effects for 6 deliveries in the case's own epoch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_providers import ProviderProcess
from fake_providers._credentials import ADMIN_TOKEN_ENV, CREDENTIALS_ENV
from harness._case import Landing, StepRecord
from harness.campaign import _verdict
from harness.invariants import CheckResult, Status
from harness.supervisor import OutcomeKind, WorkerOutcome
from tests._systems import HOSTILE_REPORT_ENV, HOSTILE_SOURCES_ENV

ROOT = Path(__file__).resolve().parent.parent

#: what a user may have exported for a provider of their own, by hand
USERS_OWN_TOKEN = "users-own-admin-token-0123456789"


def _certify_hostile(
    tmp_path: Path, sources: str
) -> tuple[int, str, dict[str, Any], dict[str, Any]]:
    """``certify --case baseline`` of the hostile worker; (exit, output, its report, case)."""
    hostile = tmp_path / "hostile.json"
    out = tmp_path / "reports"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        **{
            HOSTILE_REPORT_ENV: str(hostile),
            HOSTILE_SOURCES_ENV: sources,
            ADMIN_TOKEN_ENV: USERS_OWN_TOKEN,
        },
    )
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "harness", "certify"),
            *("--system", "tests._systems:RESETS_EPOCH", "--case", "baseline", "--seed", "1"),
            *("--report-dir", str(out)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    printed = proc.stdout + proc.stderr
    assert hostile.exists(), printed  # the worker ran to its end and said what it did
    report = json.loads((out / "report.json").read_text())
    (case,) = report["cases"]
    return proc.returncode, printed, json.loads(hostile.read_text()), case


def test_a_worker_finds_no_admin_token_in_any_environment_it_can_read(tmp_path: Path) -> None:
    """It reads every sibling's /proc/<pid>/environ (the provider's), its own environment and
    tries its own credential: none opens the admin API, so the case's epoch keeps its
    duplicates and the case is a violation of exactly_once_effect (05909b5: exit 0)."""
    code, printed, hostile, case = _certify_hostile(tmp_path, "environ")
    assert hostile["sent_twice"] > 0, hostile
    assert hostile["reset_to"] is None, hostile
    assert hostile["tried"], hostile
    assert all(status == 401 for _, status in hostile["tried"]), hostile
    # no sibling's environment (the provider's) names an admin token, and not even a token
    # the user exported for a provider of their own reaches the worker's environment
    assert not any(where.startswith("/proc/") for where, _ in hostile["tried"]), hostile
    assert not any(ADMIN_TOKEN_ENV in where for where, _ in hostile["tried"]), hostile
    assert code == 1, printed
    assert case["verdict"] == "fail", case
    assert case["invariants"]["exactly_once_effect"]["status"] == "fail", case


def test_a_reset_the_harness_did_not_make_is_evidence_and_hides_nothing(tmp_path: Path) -> None:
    """A forked worker still holds the harness's admin client in its memory: with it, it
    resets the provider and sends each message once more in the new epoch. The harness
    judges the case's own epoch (the duplicates are a violation) and names the change."""
    code, printed, hostile, case = _certify_hostile(tmp_path, "environ,memory")
    assert hostile["reset_to"] is not None, hostile
    assert code == 1, printed
    assert case["invariants"]["exactly_once_effect"]["status"] == "fail", case
    moved = [n for n in case["notes"] if "epoch moved from" in n]
    assert moved, case["notes"]
    assert f"to {hostile['reset_to']}" in moved[0], case["notes"]


def test_an_epoch_change_turns_a_would_be_pass_into_unknown_and_keeps_a_failure() -> None:
    ok = {"x": CheckResult(Status.PASS, "ok")}
    bad = {"x": CheckResult(Status.FAIL, "broken")}
    done = [WorkerOutcome("w1", 1, OutcomeKind.COMPLETED, None, None, None, None, 0.0, 0.0)]
    landed = [StepRecord("crash@a#1", Landing.LANDED, "")]
    assert _verdict(ok, done, landed, planned=1) is Status.PASS
    assert _verdict(ok, done, landed, planned=1, evidence_doubted=True) is Status.UNKNOWN
    assert _verdict(bad, done, landed, planned=1, evidence_doubted=True) is Status.FAIL


def test_a_providers_environment_holds_none_of_its_secrets(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """/proc/<provider pid>/environ names no admin token and no credential, even when the
    user exported the variables for a provider of their own; the provider works."""
    monkeypatch.setenv(ADMIN_TOKEN_ENV, USERS_OWN_TOKEN)
    monkeypatch.setenv(
        CREDENTIALS_ENV, '{"x": {"secret": "users-own-secret-0123", "scope": ["*"]}}'
    )
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        environ = Path(f"/proc/{provider.pid}/environ").read_bytes().decode(errors="replace")
        assert provider.admin_token not in environ
        assert provider.secret() not in environ
        assert ADMIN_TOKEN_ENV not in environ
        assert CREDENTIALS_ENV not in environ
        assert USERS_OWN_TOKEN not in environ
        # the secrets did arrive: the admin API and the worker credential both work
        assert provider.admin.health()["ok"]
        assert provider.admin.reset() == 2
        assert provider.admin.count() == 0
