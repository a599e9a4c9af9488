"""``examples/two_channel``, run as its README says: the naive order worker's sweep exits 1
naming ``exactly_once_effect`` (at a crash between the webhook and the e-mail of one order
too), its report counts both providers' effects, and the fixed worker's sweep exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.engine.case.campaign import CampaignSettings, run_campaign
from harness.engine.plan import scenario
from harness.engine.plan.schedule import CaseSpec
from harness.invariants import Status

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "two_channel"


def _sweep(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    reports = tmp_path / f"{name}-reports"
    env = {**os.environ, "CRASH_HARNESS_TMPDIR": str(tmp_path), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "harness", "sweep", f"examples/two_channel/{name}.toml"]
    command += ["--report-dir", str(reports), "--determinism", "0"]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads((reports / "report.json").read_text())
    return done, report


def test_the_naive_worker_fails_exactly_once_on_both_channels(tmp_path: Path) -> None:
    done, report = _sweep("naive", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "invariants violated: exactly_once_effect" in done.stdout
    cases = {c["id"]: c for c in report["cases"]}
    assert set(cases) == {
        "baseline",
        "crash@after_webhook#1",
        "crash@after_webhook#2",
        "crash@after_mail#1",
        "crash@after_mail#2",
        # the far-side points: each provider's accepted requests, the reply held
        "crash@accepted.hooks#1",
        "crash@accepted.hooks#2",
        "crash@accepted.mail#1",
        "crash@accepted.mail#2",
    }
    assert cases["baseline"]["verdict"] == "pass", cases["baseline"]["invariants"]
    for far in ("hooks", "mail"):  # the same window, found with no boundary() at all
        held = cases[f"crash@accepted.{far}#1"]["invariants"]["exactly_once_effect"]
        assert held["status"] == "fail", (far, held)
    for case in cases.values():
        # every case counts both providers' effects, each apart
        assert set(case["effects"]["by_provider"]) == {"hooks", "mail"}, case["id"]
        assert case["effects"]["intended"] == 4
    # a crash between the two sends of one order: the webhook went out twice
    between = cases["crash@after_webhook#1"]["invariants"]["exactly_once_effect"]
    assert between["status"] == "fail"
    (dup,) = between["evidence"]["duplicates"]
    assert (dup["run_id"], dup["destination"], dup["providers"]) == (
        "ORD-0001",
        "hooks/orders",
        ["hooks"],
    )
    # a crash after both sends: the order's webhook and its mail both went out twice
    after = cases["crash@after_mail#1"]["invariants"]["exactly_once_effect"]
    assert after["status"] == "fail"
    assert sorted(p for d in after["evidence"]["duplicates"] for p in d["providers"]) == [
        "hooks",
        "mail",
    ]


def test_the_fixed_worker_passes_the_same_sweep(tmp_path: Path) -> None:
    done, report = _sweep("fixed", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(report["cases"]) == 9  # 4 boundary hits, 4 far-side points, the baseline
    for case in report["cases"]:
        assert case["verdict"] == "pass", (case["id"], case["notes"])
        assert case["effects"]["by_provider"]["hooks"]["accepted"] == 2
        assert case["effects"]["by_provider"]["mail"]["accepted"] == 2


def test_the_fix_holds_by_its_mailbox_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lookup before a resend (the mail "never arrived"), the fixed worker
    mails twice after a crash after the mail: the reconcile is what makes it hold, not
    luck. (Workers are forked, so the patch reaches them.)"""
    from examples.two_channel import crash, shop_fixed

    monkeypatch.setattr(shop_fixed, "mail_arrived", lambda *args: False)
    fixed = scenario.load(EXAMPLE / "fixed.toml")
    settings = CampaignSettings(
        system=crash.FIXED,
        seed=1,
        workdir=tmp_path,
        cases=[CaseSpec.parse("crash@after_mail#1")],
        **fixed.campaign_fields(),
    )
    (case,) = run_campaign(settings).cases
    check = case.invariants["exactly_once_effect"]
    assert check.status is Status.FAIL, check.summary
    assert "through provider mail" in check.summary
