"""``examples/plain_outbox``: the outbox worker as it ships (no harness import, no
``boundary()``, its settings from its own environment), crashed at the commits and sends the
harness discovers in it. The naive one duplicates a webhook; the fixed one holds, on the
scenario route and on ``certify --system-cmd``."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests._cli import run_harness

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "plain_outbox"
#: the worker's own settings, filled by the harness (as in plain.toml)
SETTINGS = (
    "DATABASE_URL={db.url} WEBHOOK_URL={provider.url}/hooks WEBHOOK_TOKEN={provider.credential}"
)
#: the receiver plain.toml names, as --set words for the command-line route
RECEIVER = (
    *("--set", 'provider_preset="webhook"'),
    *("--set", 'provider_options={"dedupe":false}'),
    *("--set", "provider_faults=[]"),
    *("--set", "runs=2", "--set", "destinations_per_topic=1"),
)


def _harness(cwd: Path, tmp_path: Path, *args: str) -> tuple[int, str, dict]:
    report_dir = tmp_path / f"r{len(list(tmp_path.glob('r*')))}"
    return run_harness(cwd, tmp_path, *args, report_dir=report_dir)


def test_the_plain_worker_imports_nothing_of_the_harness() -> None:
    """The done-when of #25: ``grep -rn harness examples/plain_outbox/*.py`` finds nothing."""
    found = [
        f"{p.name}:{n}: {line}"
        for p in sorted(EXAMPLE.glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "harness" in line
    ]
    assert not found, found
    assert not re.search(r"\bboundary\(", (EXAMPLE / "worker.py").read_text())


def test_the_discovered_sweep_finds_the_duplicate(tmp_path: Path) -> None:
    """The sweep lists the commits and sends it discovered, crashes at every hit of each
    and at every webhook the receiver accepted, and exits 1 naming exactly_once_effect: a
    crash after the receiver accepted the webhook (after the send, before the commit that
    records it, or the receiver holding its reply) sends it again. A crash before
    the send, or after the commit, does not; the replay line reruns one failing case."""
    status, said, report = _harness(
        ROOT, tmp_path, "sweep", "examples/plain_outbox/plain.toml", "--determinism", "0"
    )
    assert status == 1, said
    assert "exactly_once_effect" in said
    assert "discovered" in said
    for kind in ("before_send", "after_send", "before_commit", "after_commit"):
        assert re.search(rf"^\s+{kind}\.worker\.\d+\s+x\d", said, re.M), (kind, said)
    verdicts = {c["id"]: c["verdict"] for c in report["cases"]}
    failed = {re.sub(r"\.\d+#", "#", c) for c, v in verdicts.items() if v == "fail"}
    passed = {re.sub(r"\.\d+#", "#", c) for c, v in verdicts.items() if v == "pass"}
    assert {"crash@after_send.worker#1", "crash@after_send.worker#2"} <= failed, verdicts
    # the same window from the receiver's side: its k-th accepted webhook, reply held
    assert {"crash@accepted.webhook#1", "crash@accepted.webhook#2"} <= set(verdicts), verdicts
    assert verdicts["crash@accepted.webhook#1"] == "fail", verdicts
    assert {"baseline", "crash@before_send.worker#1", "crash@after_commit.worker#2"} <= passed
    assert all(v in ("pass", "fail") for v in verdicts.values()), verdicts
    broken = {
        name
        for c in report["cases"]
        if c["verdict"] == "fail"
        for name, check in c["invariants"].items()
        if check["status"] == "fail"
    }
    assert broken == {"exactly_once_effect"}, broken
    (replay,) = [
        c["replay"]
        for c in report["cases"]
        if re.fullmatch(r"crash@after_send\.worker\.\d+#1", c["id"])
    ]
    words = shlex.split(replay)[1:]
    again, said_again, _ = _harness(ROOT, tmp_path, *words)
    assert again == 1, said_again
    assert "exactly_once_effect" in said_again, said_again


def test_the_fixed_worker_holds_on_every_discovered_point(tmp_path: Path) -> None:
    """worker_fixed.py records "attempted" before the send and asks the receiver after a
    restart: every case of its sweep passes (none unknown, none skipped), and the sweep's
    determinism sample (far-side cases included) replays to the same content."""
    status, said, report = _harness(
        ROOT, tmp_path, "sweep", "examples/plain_outbox/plain_fixed.toml"
    )
    assert status == 0, said
    cases = report["cases"]
    assert len(cases) > 8, said
    assert all(c["verdict"] == "pass" for c in cases), said
    assert any(c["id"].startswith("crash@after_send.worker_fixed.") for c in cases)


def test_certify_system_cmd_certifies_an_unchanged_worker(tmp_path: Path) -> None:
    """``certify --system-cmd`` on the unchanged fixed worker, from its own folder: its dry
    run finds the commits and sends, each is crashed once, and it is certified; the naive
    worker, the same way, is not (and its replay line keeps the templates, not the token)."""
    fixed = f"{SETTINGS} python worker_fixed.py"
    status, said, report = _harness(
        EXAMPLE, tmp_path, "certify", "--system-cmd", fixed, "--seed", "1", *RECEIVER
    )
    assert status == 0, said
    assert re.search(r"boundaries covered (\d+)/\1 ", said), said
    verdicts = {c["id"]: c["verdict"] for c in report["cases"]}
    assert set(verdicts.values()) == {"pass"}, verdicts
    assert "crash@accepted.webhook#1" in verdicts
    assert any(re.fullmatch(r"crash@after_send\.worker_fixed\.\d+#1", c) for c in verdicts)
    naive = f"{SETTINGS} python worker.py"
    status, said, report = _harness(
        EXAMPLE, tmp_path, "certify", "--system-cmd", naive, "--seed", "1", *RECEIVER
    )
    assert status == 1, said
    assert "exactly_once_effect" in said, said
    replays = [line for line in said.splitlines() if "replay:" in line]
    assert replays, said
    assert all("WEBHOOK_TOKEN={provider.credential}" in r for r in replays), replays
