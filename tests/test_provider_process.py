"""ProviderProcess lifecycle: start, stop, kill, restart on the same log, and the CLI."""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from fake_providers import AdminClient, ProviderError, ProviderProcess, ProviderStartError

BODY = {
    "destination": "acct_1",
    "run_id": "run-1",
    "delivery_id": "d-1",
    "body": "hello",
    "recognizer": "rec-1",
}


CLI = [sys.executable, "-m", "fake_providers", "serve"]


def send(session: requests.Session, provider: ProviderProcess, key: str) -> requests.Response:
    """POST one message with Idempotency-Key ``key``."""
    headers = {**provider.auth_headers(), "Idempotency-Key": key}
    return session.post(f"{provider.url}/v1/messages", json=BODY, headers=headers, timeout=5)


def assert_gone(pid: int) -> None:
    """The process ``pid`` no longer exists (it was reaped, not left a zombie)."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    """After stop() the server's pid is gone, and a second stop() is harmless."""
    provider = ProviderProcess.start(log_path=tmp_path / "effects.sqlite")
    pid = provider.pid
    assert provider.running
    os.kill(pid, 0)
    assert provider.admin.health()["ok"] is True
    provider.stop()
    assert not provider.running
    assert_gone(pid)
    provider.stop()


def test_context_manager_stops_on_exit(tmp_path: Path) -> None:
    """Leaving the with-block stops the server."""
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        pid = provider.pid
    assert_gone(pid)


def test_sigkill_then_restart_keeps_accepted_effects(tmp_path: Path) -> None:
    """Effects acknowledged before a SIGKILL are all in the log after a restart."""
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        epoch = provider.admin.reset()
        with requests.Session() as s:
            ids = [send(s, provider, f"k{i}").json()["id"] for i in range(5)]
            old_pid = provider.pid
            provider.kill()
            assert_gone(old_pid)
            provider.restart()
            assert provider.pid != old_pid
            assert provider.admin.health()["epoch"] == epoch
            survivors = provider.admin.accepted()
            assert [e.provider_message_id for e in survivors] == ids
            retry = send(s, provider, "k0")
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert retry.json()["id"] == ids[0]


def test_restart_keeps_port_when_free_and_clock_offset(tmp_path: Path) -> None:
    """A restart reuses the old port if it is free, and the provider clock does not rewind."""
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite", window_s=100) as provider:
        url = provider.url
        with requests.Session() as s:
            send(s, provider, "k1")
            provider.admin.advance_clock(100)
            provider.kill()
            provider.restart()
            assert provider.url == url
            again = send(s, provider, "k1")
        assert "Idempotent-Replayed" not in again.headers
        provider.admin.assert_effects(1, outcome="expired_then_accepted")


def test_restart_moves_to_new_port_when_old_one_is_taken(tmp_path: Path) -> None:
    """If something else grabbed the port, restart picks a new one and updates url."""
    with ProviderProcess.start(log_path=tmp_path / "a.sqlite") as provider:
        port = provider.port
        provider.kill()
        with ProviderProcess.start(log_path=tmp_path / "b.sqlite", port=port) as squatter:
            provider.restart()
            assert squatter.port == port
            assert provider.port != port
            assert provider.admin.health()["ok"] is True


def test_non_loopback_host_is_refused(tmp_path: Path) -> None:
    """Binding to a non-loopback address fails with a clear error, in-process and via CLI."""
    with pytest.raises(ProviderStartError, match="not a loopback address"):
        ProviderProcess.start(log_path=tmp_path / "effects.sqlite", host="0.0.0.0")
    result = subprocess.run(
        [*CLI, "--host", "0.0.0.0", "--log", str(tmp_path / "cli.sqlite")],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr
    assert result.stdout == ""


def test_unknown_preset_is_refused(tmp_path: Path) -> None:
    """An unknown preset name fails before any process starts."""
    with pytest.raises(ProviderStartError, match="unknown preset"):
        ProviderProcess.start(log_path=tmp_path / "effects.sqlite", preset="carrier-pigeon")


def test_startup_failure_carries_stderr(tmp_path: Path) -> None:
    """If the server dies before it is ready, the error includes what it printed on stderr."""
    log = tmp_path / "effects.sqlite"
    log.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.raises(ProviderStartError, match=r"(?s)exited with status.*not a database"):
        ProviderProcess.start(log_path=log)


def test_startup_timeout_kills_the_server(tmp_path: Path) -> None:
    """A server not ready before the deadline is killed and reported."""
    with pytest.raises(ProviderStartError, match="not ready within"):
        ProviderProcess.start(log_path=tmp_path / "effects.sqlite", startup_timeout_s=0)


def test_admin_client_reports_errors_as_provider_error(tmp_path: Path) -> None:
    """A wrong admin token or a dead server surfaces as ProviderError, not a raw exception."""
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        with (
            AdminClient(provider.url, "wrong-token") as bad,
            pytest.raises(ProviderError, match="401"),
        ):
            bad.effects()
        url = provider.url
    with AdminClient(url, "whatever", timeout_s=2) as dead, pytest.raises(ProviderError):
        dead.health()


def test_cli_by_hand_invents_secrets_and_exits_on_sigterm(tmp_path: Path) -> None:
    """Without env secrets the CLI prints them once on stderr, one JSON line on stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_HARNESS_PROVIDER_")}
    stderr_path = tmp_path / "stderr.txt"
    argv = [*CLI, "--preset", "payments", "--port", "0", "--log", str(tmp_path / "effects.sqlite")]
    with stderr_path.open("wb") as stderr_file:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr_file, env=env
        )
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        assert ready, "no ready line within 15 s"
        ready_line = json.loads(proc.stdout.readline())
        assert set(ready_line) == {"url", "pid"}
        assert ready_line["pid"] == proc.pid
        lines = stderr_path.read_text().splitlines()
        [bearer] = [line.split("Bearer ")[1] for line in lines if "Bearer " in line]
        [admin_token] = [line.split("X-Admin-Token: ")[1] for line in lines if "X-Admin" in line]
        with requests.Session() as s:
            response = s.post(
                f"{ready_line['url']}/v1/messages",
                json=BODY,
                headers={"Authorization": f"Bearer {bearer}", "Idempotency-Key": "k"},
                timeout=5,
            )
            assert response.status_code == 200
        with AdminClient(ready_line["url"], admin_token) as admin:
            [effect] = admin.accepted()
        assert effect.credential_id == "default"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_unknown_or_bad_options_are_refused_before_start(tmp_path: Path) -> None:
    """An option the preset does not have, or a bad value, fails before any process starts."""
    with pytest.raises(ProviderStartError, match="has no option"):
        ProviderProcess.start(log_path=tmp_path / "e.sqlite", options={"strip_metadata": True})
    with pytest.raises(ProviderStartError, match="must be true or false"):
        ProviderProcess.start(
            log_path=tmp_path / "e.sqlite", preset="chat", options={"strip_metadata": "maybe"}
        )
    assert not (tmp_path / "e.sqlite").exists()


def test_version_1_log_is_upgraded_in_place(tmp_path: Path) -> None:
    """A log written before contents existed opens, keeps its records and its keys."""
    log = tmp_path / "old.sqlite"
    conn = sqlite3.connect(log)
    conn.executescript(
        """
        CREATE TABLE effects (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, epoch INTEGER NOT NULL,
            received_at REAL NOT NULL, credential_id TEXT, destination TEXT, run_id TEXT,
            delivery_id TEXT, idempotency_key TEXT, payload_hash TEXT, recognizer TEXT,
            outcome TEXT NOT NULL, provider_message_id TEXT, fault TEXT, status_code INTEGER,
            response_body TEXT);
        CREATE TABLE epochs (epoch INTEGER PRIMARY KEY, started_at REAL NOT NULL);
        CREATE TABLE clock_advances (id INTEGER PRIMARY KEY AUTOINCREMENT,
            advance_s REAL NOT NULL, at REAL NOT NULL);
        PRAGMA user_version=1;
        """
    )
    with conn:
        conn.execute("INSERT INTO epochs VALUES (1, ?)", (time.time(),))
        conn.execute(
            "INSERT INTO effects (epoch, received_at, credential_id, destination, run_id,"
            " delivery_id, idempotency_key, payload_hash, recognizer, outcome,"
            " provider_message_id, status_code, response_body)"
            " VALUES (1, ?, 'worker', 'acct_1', 'run-1', 'd-1', 'k0', 'h', 'rec-1', 'fresh',"
            " 'msg_old', 200, ?)",
            (time.time(), json.dumps({"id": "msg_old", "status": "accepted"})),
        )
    conn.close()
    with ProviderProcess.start(log_path=log) as provider, requests.Session() as s:
        [old] = provider.admin.accepted()
        assert old.provider_message_id == "msg_old"
        assert send(s, provider, "k1").status_code == 200
        assert len(provider.admin.accepted()) == 2
