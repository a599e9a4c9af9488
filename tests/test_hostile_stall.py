"""A provider that stops answering (SIGSTOP) is noticed in seconds, by its heartbeat.

A stopped provider keeps its sockets open: its clients see only read time-outs. On 8213f3e a
worker that SIGSTOPped the provider kept its case waiting for minutes of them (its worker
hung on a lookup, then the drain, the audit and the next case's epoch reset timed out in
turn) and the next case ended the run with a traceback (exit 4). Now the provider's
serving loop beats on a pipe only the harness reads (``fake_providers._heartbeat``); the
case in flight is unknown, naming the provider and the signal, the provider is killed and
restarted on its log, and the next case passes. No duration is asserted here:
``benchmarks/bench_provider_stall.py`` measures how soon the stop is noticed.

The hostile worker finds the provider through ``/proc``, as any process of the same user
can where workers share the harness's PID namespace: so these run with
``CRASH_HARNESS_ISOLATION=off``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_providers import ProviderProcess
from fake_providers._heartbeat import Listener
from harness import systems
from harness.engine.case import _provider_watch
from harness.engine.case.campaign import Campaign, CampaignSettings, CaseSpec
from harness.engine.process._lifeline import LifelineCut
from harness.engine.process.supervisor import Supervisor
from harness.invariants import Status
from tests._hostile_stall import STALL_AFTER_ENV, STALL_REPORT_ENV
from tests._procs import processes_with, wait_ready

ROOT = Path(__file__).resolve().parent.parent


def _state(pid: int) -> str | None:
    """``/proc/<pid>/stat``'s state letter, None once the process is gone."""
    return _provider_watch.process_state(pid)


def _stopped(child: int) -> None:
    """Wait until ``child`` (a process this one started) is stopped: a SIGSTOP lands when
    the kernel next schedules it, not when ``kill`` returns (``waitid``, no polling)."""
    os.waitid(os.P_PID, child, os.WSTOPPED | os.WNOWAIT)


def _run(
    tmp_path: Path, argv: list[str], env: dict[str, str], *, during: Any = None
) -> tuple[int, str, dict[str, Any], str]:
    """Run the harness (``argv``) with ``env``; ``during(marker)`` runs while it does.
    Returns (exit, output, report, marker)."""
    marker = uuid.uuid4().hex
    scratch = tmp_path / "scratch"  # a kept work dir stays here, pruning nobody else's
    scratch.mkdir()
    full_env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CRASH_HARNESS_ISOLATION="off",
        CRASH_HARNESS_TMPDIR=str(scratch),
        CH_TEST_MARKER=marker,
        **env,
    )
    out = tmp_path / "reports"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *argv, "--report-dir", str(out)],
        cwd=tmp_path,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if during is not None:
            during(marker)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = json.loads((out / "report.json").read_text())
    return proc.returncode, stdout + stderr, report, marker


def _assert_stopped_case_then_pass(
    code: int, printed: str, report: dict[str, Any], stopped: int, marker: str
) -> None:
    """The stopped case is unknown naming the provider and SIGSTOP, the next one passes,
    exit 3, no traceback, and nothing of the run is left (stopped or not)."""
    assert "Traceback" not in printed, printed
    assert code == 3, printed
    first, second = report["cases"]
    assert first["verdict"] == "unknown", first
    said = " ".join(first["notes"])
    assert f"provider payments (pid {stopped}) stopped (SIGSTOP)" in said, said
    assert "restarted on its log" in said, said
    assert second["verdict"] == "pass", second["notes"]
    assert _state(stopped) is None  # killed (and reaped) before the restart, not left stopped
    left = [p for p in processes_with(marker) if p != os.getpid()]
    assert left == [], {p: _state(p) for p in left}


def test_a_worker_that_sigstops_its_provider_gets_unknown_and_the_next_case_passes(
    tmp_path: Path,
) -> None:
    """The hostile worker SIGSTOPs the provider after its first accepted message and goes
    on sending: the case is unknown naming the provider and the signal, never a pass, and
    the next case runs against a restarted provider and passes (8213f3e: minutes of time-
    outs, then a traceback and exit 4)."""
    stall_report = tmp_path / "stall.json"
    argv = ["certify", "--system", "tests._hostile_stall:STOPS_PROVIDER", "--seed", "1"]
    argv += ["--case", "baseline", "--case", "crash@after_claim#1"]
    code, printed, report, marker = _run(tmp_path, argv, {STALL_REPORT_ENV: str(stall_report)})
    (stopped,) = json.loads(stall_report.read_text())["pids"]  # it found the provider
    _assert_stopped_case_then_pass(code, printed, report, stopped, marker)
    # ended by the harness for its provider, while it still ran: not done, not hung
    assert [w["outcome"] for w in report["cases"][0]["workers"]] == ["stopped"]


def _providers(marker: str) -> list[int]:
    """The fake providers among the processes carrying ``marker``."""
    found = []
    for pid in processes_with(marker):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if comm.startswith("fp:") or b"fake_providers" in argv:
            found.append(pid)
    return found


def test_a_provider_stopped_from_outside_mid_case_is_noticed_without_any_hostile_worker(
    tmp_path: Path,
) -> None:
    """While the first case's worker hangs (as any slow worker may), the test SIGSTOPs the
    provider: the case is unknown naming it, though no request of the worker ever timed
    out, the hung worker is killed with it, and the next case passes."""
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    stopped: list[int] = []

    def stop_the_provider(marker: str) -> None:
        wait_ready(fifo, 120)  # the first case's worker runs (and hangs)
        (provider,) = _providers(marker)
        os.kill(provider, signal.SIGSTOP)
        stopped.append(provider)

    argv = ["certify", "--system", "tests._systems:HANGS_ONCE", "--seed", "1"]
    argv += ["--case", "baseline", "--case", "crash@after_claim#1"]
    env = {
        "CH_TEST_READY_FIFO": str(fifo),
        "CH_TEST_HANGS_ONCE_MARKER": str(tmp_path / "hung-once"),
    }
    code, printed, report, marker = _run(tmp_path, argv, env, during=stop_the_provider)
    _assert_stopped_case_then_pass(code, printed, report, stopped[0], marker)
    assert [w["outcome"] for w in report["cases"][0]["workers"]] == ["stopped"]


def _hangs() -> None:
    signal.pause()


@pytest.mark.parametrize("how", ["wait", "ends_within", "pause", "wait_event"])
def test_a_wait_on_a_worker_ends_when_its_provider_stops(tmp_path: Path, how: str) -> None:
    """Every wait the supervisor makes looks at the provider's heartbeat: a SIGSTOPped
    provider, whose pidfd never turns ready, ends each wait with LifelineCut naming it."""
    trace = tmp_path / "trace.jsonl"
    with (
        ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider,
        Supervisor(workdir=tmp_path) as sup,
    ):
        _provider_watch.watch(provider, sup)
        worker = sup.start("w1", _hangs, trace_path=trace)
        os.kill(provider.pid, signal.SIGSTOP)
        try:
            waits = {
                "wait": lambda: sup.wait(worker, timeout_s=120, trace_path=trace),
                "ends_within": lambda: sup.ends_within(worker, 120),
                "pause": lambda: sup.pause(120),
                "wait_event": lambda: sup.wait_event(worker, timeout_s=120),
            }
            with pytest.raises(LifelineCut) as cut:
                waits[how]()
            assert f"provider payments (pid {provider.pid}) stopped (SIGSTOP)" in str(cut.value)
            assert cut.value.how == str(cut.value)
            sup.kill(worker, trace_path=trace, reason="provider stopped")
            sup.wait(worker, timeout_s=60, trace_path=trace)
        finally:
            os.kill(provider.pid, signal.SIGCONT)
        assert sup.live_pids == []


def test_a_provider_holding_a_reply_for_the_harness_is_no_stall(tmp_path: Path) -> None:
    """A far-side hold (the harness's own doing) keeps one request unanswered, not the
    serving loop: a wait longer than the hung limit, with the reply held all along, is not
    cut, and the provider still answers."""
    with (
        ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider,
        Supervisor(workdir=tmp_path) as sup,
    ):
        _provider_watch.watch(provider, sup)
        epoch = provider.admin.reset()
        provider.admin.arm_hold(epoch, 1)
        answered: list[int] = []

        def send() -> None:
            body = {"destination": "a", "run_id": "r", "delivery_id": "d", "body": "x"}
            try:
                reply = requests.post(
                    f"{provider.url}/epoch/{epoch}/v1/messages",
                    json={**body, "recognizer": "ch-0123456789ab"},
                    headers={**provider.auth_headers(), "Idempotency-Key": "k"},
                    timeout=120,
                )
                answered.append(reply.status_code)
            except requests.RequestException:
                answered.append(0)  # the held connection cut when its epoch ends

        sender = threading.Thread(target=send)
        sender.start()
        try:
            assert provider.admin.wait_held(epoch, timeout_s=60)["holding"]
            sup.pause(_provider_watch.HUNG_AFTER_S + 1)  # raises LifelineCut if taken for one
            assert _provider_watch.stall(provider) is None
            assert provider.admin.health()["ok"]
        finally:
            provider.admin.reset()  # the epoch is over: the held reply's connection is cut
            sender.join(60)
        assert answered == [0]


def test_a_provider_stopped_between_cases_is_killed_and_restarted_on_its_log(
    tmp_path: Path,
) -> None:
    """Found stopped before a case opens its epoch: killed, restarted on the same log, the
    case says so and passes; the first case's effects are still in the log."""
    settings = CampaignSettings(system=systems.resolve("reference"), seed=3, workdir=tmp_path)
    with Campaign(settings) as campaign:
        assert campaign.provider is not None
        first = campaign.run(CaseSpec())
        old = campaign.provider.pid
        os.kill(old, signal.SIGSTOP)
        _stopped(old)
        second = campaign.run(CaseSpec.parse("crash@after_claim#1"))
        logged = campaign.provider.admin.effects(epoch="all")
        assert campaign.provider.pid != old
    assert first.verdict is Status.PASS, first.notes
    assert second.verdict is Status.PASS, second.notes
    assert second.notes[0].startswith(f"provider payments (pid {old}) stopped (SIGSTOP)")
    assert "before this case; restarted on its log" in second.notes[0]
    assert _state(old) is None
    assert sum(1 for e in logged if e.accepted) == first.accepted + second.accepted


def test_a_provider_whose_loop_stops_beating_while_it_runs_is_lost_as_hung(
    tmp_path: Path,
) -> None:
    """Not stopped, but its serving loop silent (stuck): after the hung limit a wait ends
    with LifelineCut naming the provider as hung and its process state, never stopped. The
    loop's beats are cut by reading them from a pipe nobody writes to."""
    with (
        ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider,
        Supervisor(workdir=tmp_path) as sup,
    ):
        silent_r, silent_w = os.pipe()
        beating = provider._heartbeat
        try:
            provider._heartbeat = Listener(silent_r)  # the loop beats into the old pipe, unread
            _provider_watch.watch(provider, sup)
            with pytest.raises(LifelineCut) as cut:
                sup.pause(120)
            said = str(cut.value)
            assert f"provider payments (pid {provider.pid}) hung (not answering" in said, said
            assert "stopped" not in said, said
            assert provider.admin.health()["ok"]  # it runs: only its beats went unheard
        finally:
            os.close(silent_w)
            if beating is not None:
                beating.close()


@pytest.mark.parametrize("started", ["forked", "new interpreter"])
def test_a_provider_beats_however_it_was_started_and_a_stop_is_named_by_its_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: str
) -> None:
    """Forked from the caller or a new interpreter (``--heartbeat-fd`` either way): it beats,
    a SIGSTOP is named as such once it is silent, and a SIGCONT makes it a provider again."""
    if started == "new interpreter":
        monkeypatch.setenv("FAKE_PROVIDERS_NO_FORK", "1")
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        beat = provider.heartbeat_fd
        assert beat is not None
        assert select.select([beat], [], [], 60)[0]  # a beat came
        assert _provider_watch.stall(provider) is None
        os.kill(provider.pid, signal.SIGSTOP)
        try:
            _stopped(provider.pid)
            said = _provider_watch.stall(provider, settle=True)  # waits out the stopped limit
            assert said is not None
            assert said.startswith(f"provider payments (pid {provider.pid}) stopped (SIGSTOP)")
        finally:
            os.kill(provider.pid, signal.SIGCONT)
        assert select.select([beat], [], [], 60)[0]  # beating again
        assert _provider_watch.stall(provider) is None
        assert provider.admin.health()["ok"]


#: CI's bounded sample; ``make fuzz`` sets more
EXAMPLES = int(os.environ.get("CRASH_HARNESS_RUN_FUZZ_EXAMPLES", "3"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False)
@given(
    after=st.integers(min_value=1, max_value=5),
    case=st.sampled_from(["baseline", "crash@after_claim#1", "provider_5xx:2", "provider_hold"]),
)
def test_a_provider_stopped_after_any_send_in_any_case_is_never_a_pass(
    after: int, case: str
) -> None:
    """Fuzzed: the hostile worker stops the provider after its ``after``-th send, in a
    baseline, a crash, a provider-fault or a harness-held-reply case: that case is unknown
    naming the provider, never a pass nor a failure, and the next case passes against the
    restarted provider."""
    with tempfile.TemporaryDirectory(prefix="stall-fuzz-") as tmp:
        where = Path(tmp)
        stall_report = where / "stall.json"
        argv = ["certify", "--system", "tests._hostile_stall:STOPS_PROVIDER", "--seed", "1"]
        argv += [
            "--case",
            case,
            "--case",
            "baseline" if case != "baseline" else "crash@after_claim#1",
        ]
        env = {STALL_REPORT_ENV: str(stall_report), STALL_AFTER_ENV: str(after)}
        code, printed, report, marker = _run(where, argv, env)
        assert stall_report.exists(), printed  # some incarnation made its after-th send
        (stopped,) = json.loads(stall_report.read_text())["pids"]
        _assert_stopped_case_then_pass(code, printed, report, stopped, marker)
