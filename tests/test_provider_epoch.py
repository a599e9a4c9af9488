"""A worker cannot hide a duplicate by resetting the provider or editing its log: the
harness judges the epoch it opened for the case, by number; an epoch change it did not make,
or a record of the case's epoch changed behind the provider's back, keeps the case from
passing; and no secret of the provider (admin token, credentials) travels in an environment
a worker can read (``/proc/<pid>/environ`` keeps a process's initial environment for life).

Red on 05909b5: there the provider got its admin token in its environment, the hostile
worker read it from ``/proc/<provider pid>/environ``, reset the epoch, and the case passed
(exit 0) with 12 fresh effects for 6 deliveries in the case's own epoch.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from fake_providers import ProviderProcess
from fake_providers._credentials import ADMIN_TOKEN_ENV, CREDENTIALS_ENV, SECRET_ENV
from fake_providers._effect_log import EffectLog
from harness.cli import main
from harness.engine.case.judge import _verdict
from harness.engine.process._wall import ISOLATION_ENV
from harness.engine.process.supervisor import OutcomeKind, WorkerOutcome
from harness.engine.results import Landing, StepRecord
from harness.invariants import CheckResult, Status
from tests._systems import HOSTILE_REPORT_ENV, HOSTILE_SOURCES_ENV, HOSTILE_TWICE_ENV
from tests.test_provider_cli import read_until

ROOT = Path(__file__).resolve().parent.parent

#: every provider secret variable (unset for a by-hand start, as a person's shell may not)
PROVIDER_VARS = (ADMIN_TOKEN_ENV, CREDENTIALS_ENV, SECRET_ENV)
#: what a user may have exported for a provider of their own, by hand
USERS_OWN_TOKEN = "users-own-admin-token-0123456789"


def _certify_hostile(
    tmp_path: Path, sources: str, *, twice: bool = True, wall: str = "on"
) -> tuple[int, str, dict[str, Any], dict[str, Any]]:
    """``certify --case baseline`` of the hostile worker; (exit, output, its report, case)."""
    hostile = tmp_path / "hostile.json"
    out = tmp_path / "reports"
    scratch = tmp_path / "scratch"  # a kept work dir stays here, pruning nobody else's
    scratch.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        **{
            "CRASH_HARNESS_TMPDIR": str(scratch),
            HOSTILE_REPORT_ENV: str(hostile),
            HOSTILE_SOURCES_ENV: sources,
            HOSTILE_TWICE_ENV: "1" if twice else "0",
            ADMIN_TOKEN_ENV: USERS_OWN_TOKEN,
            ISOLATION_ENV: wall,
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


@pytest.mark.parametrize("wall", ["on", "off"])
def test_a_forked_worker_finds_no_admin_token_in_the_memory_it_inherited(
    tmp_path: Path, wall: str
) -> None:
    """A forked worker walks the memory it inherited from the harness for its admin client:
    the client is there, its token is not (cleared, and the string's bytes blanked in the
    worker's copy before the worker's code runs), with or without the wall; no reset, and the
    duplicates in the case's epoch are a violation (8213f3e: it reset the epoch)."""
    code, printed, hostile, case = _certify_hostile(tmp_path, "environ,memory", wall=wall)
    assert hostile["reset_to"] is None, hostile
    assert hostile["found_clients"] > 0, hostile  # it did find the harness's client
    assert not any(where == "inherited AdminClient" for where, _ in hostile["tried"]), hostile
    assert code == 1, printed
    assert case["invariants"]["exactly_once_effect"]["status"] == "fail", case
    assert not [n for n in case["notes"] if "epoch moved from" in n], case["notes"]


def test_a_worker_sending_once_that_tries_a_reset_passes_with_its_epoch_unmoved(
    tmp_path: Path,
) -> None:
    """Each message sent once, then a reset tried with whatever its memory holds: nothing
    opens the admin API, so the epoch is the case's own and the case is judged on it (the
    detection of a reset the harness did not make, which made this unknown on 8213f3e, is
    held by test_an_epoch_change_turns_a_would_be_pass_into_unknown_and_keeps_a_failure)."""
    code, printed, hostile, case = _certify_hostile(tmp_path, "environ,memory", twice=False)
    assert hostile["reset_to"] is None, hostile
    assert code == 0, printed
    assert case["verdict"] == "pass", case
    assert not [n for n in case["notes"] if "epoch moved from" in n], case["notes"]


def test_a_walled_worker_cannot_reach_the_providers_log_file(tmp_path: Path) -> None:
    """Behind the wall the worker's /proc shows no provider and the campaign's work dir is an
    empty tmpfs: it deletes nothing, and its duplicates fail the case (8213f3e: it deleted
    them and the case was unknown)."""
    code, printed, hostile, case = _certify_hostile(tmp_path, "environ,logfile")
    assert hostile["reset_to"] is None, hostile
    assert hostile["deleted"] == 0, hostile
    assert code == 1, printed
    assert case["verdict"] == "fail", case


def test_a_worker_that_edits_the_providers_log_file_gets_no_pass(tmp_path: Path) -> None:
    """Without the wall (a kernel that refuses namespaces) and as root (CAP_SYS_PTRACE reads
    a non-dumpable provider's open files), it deletes its second copies from the log file
    itself: the provider's audit names the deleted records, the case is unknown (05909b5:
    exit 0, the edited file was taken for the provider's word). Not root: the provider's
    PR_SET_DUMPABLE 0 hides its open files, and the duplicates fail the case."""
    code, printed, hostile, case = _certify_hostile(tmp_path, "environ,logfile", wall="off")
    assert hostile["reset_to"] is None, hostile
    if os.geteuid() != 0:
        assert hostile["deleted"] == 0, hostile
        assert code == 1, printed
        return
    assert hostile["deleted"] == hostile["sent_twice"] > 0, hostile
    assert code == 3, printed
    assert case["verdict"] == "unknown", case
    changed = [n for n in case["notes"] if "log of epoch" in n]
    assert changed, case["notes"]
    assert "deleted" in changed[0], changed


def test_the_log_audit_names_records_deleted_rewritten_or_slipped_in(tmp_path: Path) -> None:
    path = tmp_path / "effects.sqlite"
    log = EffectLog(path)
    try:
        for n in range(3):
            log.append(epoch=1, received_at=float(n), outcome="fresh", destination=f"d{n}")
        assert log.audit(1).intact
        with sqlite3.connect(path) as other:  # anyone of the same user, behind its back
            other.execute("DELETE FROM effects WHERE seq = 1")
            other.execute("UPDATE effects SET outcome = 'deduplicated' WHERE seq = 2")
            other.execute("INSERT INTO effects (epoch, received_at, outcome) VALUES (1, 9, 'x')")
        assert log.audit(1).problems == (
            "record 1 deleted",
            "record 2 rewritten",
            "record 4 not written by the provider",
        )
        assert log.audit(2).intact  # another epoch: nothing was written there
    finally:
        log.close()


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


SECRET = "by-hand-secret-0123456789"
TOKEN = "by-hand-admin-token-0123456789"


def _serve_by_hand(tmp_path: Path, *args: str, env: dict[str, str], stdin: bytes = b"") -> None:
    """``crash-harness providers serve`` as a person starts it: the fixed secret and token
    work, and its /proc/<pid>/environ holds neither (nor their variables' values)."""
    argv = [sys.executable, "-m", "harness", "providers", "serve", "--preset", "payments"]
    log = tmp_path / f"effects-{len(list(tmp_path.glob('effects-*.sqlite')))}.sqlite"
    argv += ["--log", str(log), *args]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        banner = read_until(proc, b"Ctrl-C to stop.", timeout_s=120)
        url = banner.split("listening on ", 1)[1].split()[0]
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert SECRET.encode() not in environ
        assert TOKEN.encode() not in environ
        assert SECRET not in banner
        assert TOKEN not in banner
        body = {"destination": "a", "run_id": "r", "delivery_id": "d", "body": "x"}
        sent = requests.post(
            f"{url}/v1/messages",
            json={**body, "recognizer": "ch-0123456789ab"},
            headers={"Authorization": f"Bearer {SECRET}", "Idempotency-Key": "k"},
            timeout=30,
        )
        assert sent.status_code == 200, sent.text
        effects = requests.get(
            f"{url}/_admin/effects", headers={"X-Admin-Token": TOKEN}, timeout=30
        )
        assert [e["idempotency_key"] for e in effects.json()["effects"]] == ["k"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        assert proc.stdout is not None
        proc.stdout.close()


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRASH_HARNESS_PROVIDER_")}


def test_serve_by_hand_from_0600_files_or_stdin(tmp_path: Path) -> None:
    secret_file, token_file = tmp_path / "secret", tmp_path / "token"
    for path, value in ((secret_file, SECRET), (token_file, TOKEN)):
        path.write_text(value + "\n")
        path.chmod(0o600)
    args = ("--secret-file", str(secret_file), "--admin-token-file", str(token_file))
    _serve_by_hand(tmp_path, *args, env=_clean_env())
    args = ("--secret-file", str(secret_file), "--admin-token-file", "-")
    _serve_by_hand(tmp_path, *args, env=_clean_env(), stdin=f"{TOKEN}\n".encode())


def test_serve_by_hand_from_variables_blanks_them_in_proc_environ(tmp_path: Path) -> None:
    """The documented variables still work; the values leave /proc/<pid>/environ at start
    (05909b5: a same-user process read the admin token there for the provider's life)."""
    env = {**_clean_env(), SECRET_ENV: SECRET, ADMIN_TOKEN_ENV: TOKEN}
    _serve_by_hand(tmp_path, env=env)


@pytest.mark.parametrize(
    ("mode", "extra", "names"),
    [
        (0o644, (), "--admin-token-file TOKEN: readable by group or others (mode 0644)"),
        (0o600, ("--admin-token", TOKEN), "give --admin-token-file or --admin-token"),
        (0o600, ("--secret-file", "-", "--admin-token-file", "-"), "cannot both read stdin"),
    ],
)
def test_serve_refuses_a_readable_token_file_or_two_sources(
    tmp_path: Path, monkeypatch: Any, mode: int, extra: tuple[str, ...], names: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("TOKEN").write_text(TOKEN)
    Path("TOKEN").chmod(mode)
    args = ["providers", "serve", "--preset", "chat", "--admin-token-file", "TOKEN", *extra]
    if extra[-2:] == ("--admin-token-file", "-"):
        args = ["providers", "serve", "--preset", "chat", *extra]
    result = CliRunner().invoke(main, args, env=dict.fromkeys(PROVIDER_VARS))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert names in lines[0], result.stderr
    assert TOKEN not in result.stderr
