"""``crash-harness providers``: serve one preset by hand, list presets, refuse bad flags."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests
from click.testing import CliRunner

from fake_providers import AdminClient
from harness.cli import main

CLI = [sys.executable, "-m", "harness", "providers"]
REC = "ch-0123456789ab"


def read_until(proc: subprocess.Popen[bytes], marker: bytes, timeout_s: float = 15) -> str:
    """Read the child's stdout until ``marker`` appears (select with a deadline)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while marker not in buffer:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {marker!r} within {timeout_s} s: {buffer!r}"
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 4096)
            assert chunk, f"stdout closed early: {buffer!r}"
            buffer += chunk
    return buffer.decode()


def test_serve_prints_url_and_credential_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The banner names URL, log and credential; the provider works; SIGTERM stops it (0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_HARNESS_PROVIDER_")}
    log = tmp_path / "chat.sqlite"
    argv = [*CLI, "serve", "--preset", "chat", "--strip-metadata", "--log", str(log)]
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=env
        )
    try:
        banner = read_until(proc, b"Ctrl-C to stop.")
        url = re.search(r"listening on (http://\S+)", banner)
        bearer = re.search(r"Authorization: Bearer (\S+)", banner)
        token = re.search(r"X-Admin-Token: (\S+)", banner)
        assert url is not None, banner
        assert bearer is not None, banner
        assert token is not None, banner
        assert f"effect log: {log}" in banner
        assert "strip_metadata=True" in banner
        headers = {"Authorization": f"Bearer {bearer.group(1)}"}
        body = {
            "destination": "room",
            "run_id": "r",
            "delivery_id": "d",
            "body": f"hi <!-- {REC} -->",
        }
        posted = requests.post(f"{url.group(1)}/v1/messages", json=body, headers=headers, timeout=5)
        assert posted.status_code == 200
        shown = requests.get(f"{url.group(1)}/v1/threads/room", headers=headers, timeout=5)
        assert shown.json()["messages"][0]["text"] == "hi"
        with AdminClient(url.group(1), token.group(1)) as admin:
            admin.assert_effects(1, outcome="fresh", recognizer=REC)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert log.exists()
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


def test_flag_of_another_preset_is_a_usage_error() -> None:
    """--strip-metadata means nothing to payments: exit 2, nothing started."""
    result = CliRunner().invoke(
        main, ["providers", "serve", "--preset", "payments", "--strip-metadata"]
    )
    assert result.exit_code == 2
    assert "--strip-metadata does not apply to preset 'payments'" in result.output


def test_bad_option_value_is_a_usage_error() -> None:
    """An orders window over 72 h is refused with the reason."""
    result = CliRunner().invoke(
        main, ["providers", "serve", "--preset", "orders", "--window-s", "300000"]
    )
    assert result.exit_code == 2
    assert "must be <= 259200" in result.output


def test_list_shows_every_preset_and_its_options() -> None:
    """`providers list` names the six presets and their flags."""
    result = CliRunner().invoke(main, ["providers", "list"])
    assert result.exit_code == 0
    for name in ("payments", "orders", "queue-fifo", "chat", "smtp", "webhook"):
        assert f"\n{name}: " in "\n" + result.output
    for flag in ("--window-s", "--strip-metadata", "--dedupe", "--smtp-port"):
        assert flag in result.output


def test_a_host_beyond_loopback_is_refused_unless_asked_for() -> None:
    """Exit 2 naming the flag this very command takes; nothing is bound."""
    proc = subprocess.run(
        [*CLI, "serve", "--preset", "payments", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a loopback address" in proc.stderr
    assert "--allow-non-loopback (crash-harness providers serve)" in proc.stderr


def test_serving_beyond_loopback_warns_what_it_exposes(tmp_path: Path) -> None:
    """With --allow-non-loopback: a warning on stderr naming the host, the URL and the
    plaintext SMTP AUTH port; no secret in it."""
    argv = [*CLI, "serve", "--preset", "smtp", "--host", "0.0.0.0", "--allow-non-loopback"]
    argv += ["--log", str(tmp_path / "smtp.sqlite")]
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        banner = read_until(proc, b"Ctrl-C to stop.")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    warning = (tmp_path / "stderr.txt").read_text()
    assert "WARNING: the fake provider is serving on 0.0.0.0" in warning
    assert "SMTP with plaintext AUTH on port" in warning
    token = re.search(r"X-Admin-Token: (\S+)", banner)
    assert token is not None, banner
    assert token.group(1) not in warning
