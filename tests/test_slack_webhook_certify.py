"""A notifier as it ships, posting to a Slack incoming webhook whose URL (secret in its path)
comes from its environment: certified against the ``chat`` preset, a crash after Slack
answered ``ok`` and before the notifier recorded it makes the restarted one post again, and
``exactly_once_effect`` names the duplicate. The secret, filled in from
``{provider.credential}``, is in no line printed, no report and no file of the kept work dir.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli._echo import echo_discovered
from harness.engine.store import _secrets
from tests._cli import run_harness

#: tell the channel each order has shipped, then remember it was told (no harness import)
NOTIFIER = '''\
"""Tell the team's Slack channel each order has shipped, then remember it was told."""

import os

import requests
from sqlalchemy import create_engine, text

db = create_engine(os.environ["DATABASE_URL"])
hook = os.environ["SLACK_WEBHOOK_URL"]  # Slack: keep the URL out of code and argv
with db.begin() as c:
    c.execute(text("CREATE TABLE IF NOT EXISTS notified (run_id VARCHAR(200) PRIMARY KEY)"))
with db.connect() as c:
    todo = c.execute(text("SELECT run_id FROM run_requests ORDER BY run_id")).scalars().all()
    done = set(c.execute(text("SELECT run_id FROM notified")).scalars())
for run_id in todo:
    if run_id in done:
        continue
    answer = requests.post(hook, json={"text": f"Shipped (order={run_id})"}, timeout=5)
    answer.raise_for_status()
    with db.begin() as c:
        c.execute(text("INSERT INTO notified VALUES (:r)"), {"r": run_id})
'''

#: its intent: every order told once, to the one channel the webhook posts to (B0)
PREPARE = """\
from sqlalchemy import text


def prepare(engine):
    with engine.connect() as c:
        runs = c.execute(text("SELECT run_id FROM run_requests")).scalars().all()
    return [(run_id, "B0") for run_id in runs]
"""

SCENARIO = """\
[scenario]
system = "cmd:python notify.py"
prepare = "notify_intent:prepare"
seed = 3

[scenario.env]
DATABASE_URL = "{db.url}"
SLACK_WEBHOOK_URL = "{provider.url}/services/T0/B0/{provider.credential}"

[workload]
runs = 2
destinations_per_topic = 1

[provider]
preset = "chat"
faults = []
options = { identify = { run = "regex:order=([^)]+)" } }

[worker]
max_attempts = 1

[cases]
mode = "certify"
"""

#: after the webhook's path, only a mask or the template may follow: never a secret
AFTER_HOOK = re.compile(r"/services/T0/B0/(?!\*\*\*|\{provider\.credential\})(\S{0,12})")


def test_a_crash_after_slack_said_ok_posts_the_message_again(tmp_path: Path) -> None:
    work = tmp_path / "notifier"
    work.mkdir()
    (work / "notify.py").write_text(NOTIFIER)
    (work / "notify_intent.py").write_text(PREPARE)
    (work / "slack.toml").write_text(SCENARIO)
    line = next(n for n, text in enumerate(NOTIFIER.splitlines(), 1) if "requests.post(" in text)
    after_send = f"crash@after_send.notify.{line}#1"
    status, said, report = run_harness(
        work,
        tmp_path,
        "run",
        "slack.toml",
        "--case",
        "baseline",
        "--case",
        after_send,
        "--determinism",
        "0",
        "--keep-workdir",
    )
    assert status == 1, said
    verdicts = {c["id"]: c["verdict"] for c in report["cases"]}
    assert verdicts == {"baseline": "pass", after_send: "fail"}, said
    (crashed,) = [c for c in report["cases"] if c["id"] == after_send]
    broken = {n for n, check in crashed["invariants"].items() if check["status"] == "fail"}
    assert broken == {"exactly_once_effect"}, said
    assert re.search(rf"FAIL {re.escape(after_send)} .*exactly_once_effect", said), said
    # the secret of the URL: in nothing printed, nothing reported, nothing kept
    written = [said] + [p.read_text() for p in (tmp_path / "r").glob("report.*")]
    assert not [m for text in written for m in AFTER_HOOK.findall(text)], said
    kept = [p for p in tmp_path.rglob("*") if p.is_file() and "crash-harness-" in str(p)]
    assert any(p.name == "trace.jsonl" for p in kept), kept
    found = {
        str(p.relative_to(tmp_path)): AFTER_HOOK.findall(p.read_bytes().decode("latin-1"))
        for p in kept
    }
    assert not {k: v for k, v in found.items() if v}, found


def test_a_discovered_send_to_a_url_with_a_secret_is_listed_masked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The dry run's list names each send by its URL's path, which for a Slack webhook
    holds the secret the harness handed out: it is masked, as in every report."""
    secret = "hook-secret-handed-out-0123456789"
    _secrets.hand_out(secret)
    point = "after_send.notify.19"
    echo_discovered(
        (point,), {point: 2}, {point: [f"POST 127.0.0.1:4100/epoch/2/services/T0/B0/{secret}"]}
    )
    out = capsys.readouterr().out
    assert secret not in out
    assert "/services/T0/B0/***" in out
