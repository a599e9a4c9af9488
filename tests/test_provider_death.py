"""A provider killed from outside mid-campaign: the harness notices it on its pidfd, calls
the case in flight inconclusive (naming the provider and how it died), kills that case's
workers, restarts the provider on its own log for the next case, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from fake_providers import ProviderProcess
from fake_providers._errors import ProviderStartError
from harness import systems
from harness.engine.case.campaign import Campaign, CampaignSettings, CaseSpec
from harness.engine.process._lifeline import LifelineCut
from harness.engine.process.supervisor import OutcomeKind, Supervisor
from harness.errors import ExitStatus
from harness.invariants import Status
from harness.reports.outcome import Expectation, judge
from tests._procs import processes_with, wait_ready

ROOT = Path(__file__).resolve().parent.parent

_SCENARIO = """\
[scenario]
system = "tests._systems:HANGS_ONCE"
[cases]
mode = "list"
list = ["baseline", "crash@after_claim#1"]
"""


def _providers(pids: list[int]) -> list[int]:
    found = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        # a provider forked from the harness (its name says so), or a new interpreter
        if comm.startswith("fp:") or (b"fake_providers" in argv and b"serve" in argv):
            found.append(pid)
    return found


def _name_and_argv(pid: int) -> bytes:
    """A provider's process name (``fp:PRESET`` when forked) and command line."""
    return Path(f"/proc/{pid}/comm").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()


def _kill_a_provider_mid_case(
    tmp_path: Path, scenario_text: str, pick: Callable[[list[int]], int]
) -> tuple[str, str, int, int, str]:
    """Run ``scenario_text`` (whose first case's worker hangs once, saying so on a FIFO),
    SIGKILL the provider ``pick`` chooses among the run's providers while that worker runs,
    and let the run end: its stdout, stderr, exit status, the killed provider's pid and the
    marker every process of the run carries."""
    scenario = tmp_path / "two.toml"
    scenario.write_text(scenario_text)
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    marker = uuid.uuid4().hex
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CH_TEST_READY_FIFO=str(fifo),
        CH_TEST_HANGS_ONCE_MARKER=str(tmp_path / "hung-once"),
        CH_TEST_MARKER=marker,
    )
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(scenario), "--report-dir", str(out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(fifo, 120)  # the first case's worker is running (and hangs)
        provider = pick(_providers(processes_with(marker)))
        os.kill(provider, signal.SIGKILL)
        stdout, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return stdout, err, proc.returncode, provider, marker


def _only(pids: list[int]) -> int:
    (pid,) = pids
    return pid


def _the_chat_one(pids: list[int]) -> int:
    assert len(pids) == 2, pids
    (chat,) = [p for p in pids if b"chat" in _name_and_argv(p)]
    return chat


def test_a_provider_killed_mid_case_makes_that_case_unknown_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """SIGKILL the provider while the first case's worker runs: that case is unknown with a
    note naming the provider and SIGKILL, its worker is killed, the provider is restarted on
    its log and the next case passes against it; exit 3, no traceback, no process left."""
    stdout, err, code, provider, marker = _kill_a_provider_mid_case(tmp_path, _SCENARIO, _only)
    assert "Traceback" not in stdout + err
    assert code == 3, stdout + err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    first, second = report["cases"]
    assert first["id"] == "baseline"
    assert first["verdict"] == "unknown"
    said = " ".join(first["notes"])
    assert f"provider payments (pid {provider})" in said, said
    assert "SIGKILL" in said, said
    assert [w["outcome"] for w in first["workers"]] != ["hung"]
    assert second["verdict"] == "pass", second["notes"]
    assert provider not in _providers(processes_with(marker))
    left = [p for p in processes_with(marker) if p != os.getpid()]
    details = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left}
    assert left == [], f"left behind: {details}"


def _hangs() -> None:
    signal.pause()


@pytest.mark.parametrize("how", ["wait", "ends_within", "pause", "wait_event"])
def test_a_wait_on_a_worker_ends_when_its_lifeline_ends(tmp_path: Path, how: str) -> None:
    """The supervisor watches its lifelines in every wait (for a worker's end, its events, a
    daemon's poll, the pause between settle probes): each ends with LifelineCut when the
    watched process is killed, and the worker can then be killed and reaped."""
    trace = tmp_path / "trace.jsonl"
    lifeline = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        with Supervisor(workdir=tmp_path) as sup:
            sup.lifelines.watch("provider test", lifeline.pid)
            worker = sup.start("w1", _hangs, trace_path=trace)
            lifeline.kill()
            waits = {
                "wait": lambda: sup.wait(worker, timeout_s=120, trace_path=trace),
                "ends_within": lambda: sup.ends_within(worker, 120),
                "pause": lambda: sup.pause(120),
                "wait_event": lambda: sup.wait_event(worker, timeout_s=120),
            }
            with pytest.raises(LifelineCut, match=rf"provider test \(pid {lifeline.pid}\) ended"):
                waits[how]()
            sup.kill(worker, trace_path=trace, reason="lifeline cut")
            outcome = sup.wait(worker, timeout_s=60, trace_path=trace)  # fired once: reaped
            assert sup.live_pids == []
    finally:
        lifeline.kill()
        lifeline.wait()
    assert outcome.kind is OutcomeKind.CRASHED_AS_PLANNED


def _reference(tmp_path: Path) -> CampaignSettings:
    return CampaignSettings(system=systems.resolve("reference"), seed=3, workdir=tmp_path)


def test_a_provider_dead_between_cases_is_restarted_on_its_log(tmp_path: Path) -> None:
    """Found dead before a case: restarted on the same log (the first case's effects are
    still there, in their own epoch), the case says so and is judged as usual."""
    with Campaign(_reference(tmp_path)) as campaign:
        assert campaign.provider is not None
        first = campaign.run(CaseSpec())
        old = campaign.provider.pid
        campaign.provider.kill()
        second = campaign.run(CaseSpec.parse("crash@after_claim#1"))
        logged = campaign.provider.admin.effects(epoch="all")
        assert campaign.provider.running
        assert campaign.provider.pid != old
    assert first.verdict is Status.PASS, first.notes
    assert second.verdict is Status.PASS, second.notes
    assert second.notes[0].startswith(
        f"provider payments (pid {old}) was killed by SIGKILL before this case; restarted"
    )
    epochs = sorted({e.epoch for e in logged if e.accepted})
    assert len(epochs) == 2
    assert sum(1 for e in logged if e.accepted and e.epoch == epochs[0]) == first.accepted


def test_a_provider_that_will_not_restart_leaves_every_later_case_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dead and refusing to start: each later case is unknown, not run, and says why; no
    second restart is tried for every case."""
    attempts: list[int] = []

    def refuses(self: ProviderProcess, port: int, smtp_port: int | None = None) -> None:
        attempts.append(port)
        raise ProviderStartError("fake provider exited with status 1 before ready")

    with Campaign(_reference(tmp_path)) as campaign:
        assert campaign.provider is not None
        campaign.provider.kill()
        monkeypatch.setattr(ProviderProcess, "_spawn", refuses)
        later = [campaign.run(CaseSpec()), campaign.run(CaseSpec.parse("crash@after_claim#1"))]
    assert [r.verdict for r in later] == [Status.UNKNOWN, Status.UNKNOWN]
    for result in later:
        assert result.notes[0].startswith("not run: provider payments (pid ")
        assert "was killed by SIGKILL and could not be restarted" in result.notes[0]
        assert "exited with status 1 before ready" in result.notes[0]
    assert [r.landing.value for r in later[1].step_records] == ["not_run"]
    assert len(attempts) == 2  # restart() tries the old port, then any: once, not per case


def test_a_case_lost_with_its_provider_is_inconclusive_never_a_gap_or_a_pass() -> None:
    """Judged from the report: a case whose provider died is undecided whatever its held
    invariants say, and its boundary, uncovered in a full plan, is undecided, not a gap."""
    lost = "provider payments (pid 7) was killed by SIGKILL during the case"
    case = {
        "id": "crash@after_claim#1",
        "boundary": "after_claim",
        "verdict": "unknown",
        "invariants": {
            "exactly_once_effect": {"status": "pass", "summary": "ok", "evidence": {}},
            "no_silent_loss": {"status": "unknown", "summary": "undecided", "evidence": {}},
        },
        "workers": [{"worker": "w1", "outcome": "stopped"}],
        "landings": [{"step": "crash@after_claim#1", "landing": "not_run", "detail": lost}],
        "notes": [lost],
        "undecided_because": lost,
    }
    report = {
        "cases": [case],
        "summary": {"not_run": 0, "boundaries_uncovered": ["after_claim"]},
        "plan": {"full": True},
    }
    outcome = judge(report)
    assert outcome.status is ExitStatus.INCONCLUSIVE, outcome.message
    assert outcome.gaps == []
    assert outcome.undecided == [f"crash@after_claim#1: {lost}"]
    held = judge(report, Expectation(hold=("exactly_once_effect",)))
    assert held.status is ExitStatus.INCONCLUSIVE, held.message


_TWO_PROVIDERS = """\
[scenario]
system = "tests._systems:HANGS_ONCE"
[provider.pay]
preset = "payments"
[provider.talk]
preset = "chat"
[cases]
mode = "list"
list = ["baseline", "crash@after_claim#1"]
"""


def test_the_second_of_two_providers_is_watched_too(tmp_path: Path) -> None:
    """Several providers (``[provider.NAME]``): SIGKILL the second one while the first case's
    worker runs. That case is unknown with a note naming that provider, it is restarted on
    its log, and the next case passes; exit 3, nothing left behind."""
    stdout, err, code, chat, marker = _kill_a_provider_mid_case(
        tmp_path, _TWO_PROVIDERS, _the_chat_one
    )
    assert "Traceback" not in stdout + err
    assert code == 3, stdout + err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    first, second = report["cases"]
    assert first["verdict"] == "unknown"
    said = " ".join(first["notes"])
    assert f"provider talk (pid {chat})" in said, said
    assert "SIGKILL" in said, said
    assert second["verdict"] == "pass", second["notes"]
    left = [p for p in processes_with(marker) if p != os.getpid()]
    assert left == [], left
