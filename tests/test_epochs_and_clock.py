"""Verdicts a CI suite can trust: each case's requests stay in that case, the harness kills
nothing it was not asked to, and a case's clock readings replay from its seed.

The false alarm these pin down: a chat provider holding a send 1.5 s (longer than the
harness's 1 s request timeout) with a rival worker. The harness SIGKILLed the worker that
waited for the reply (its watchdog had flagged the other due work), the restart gap moved
the workers' clock while the provider's hold ran in real time, the next case reset the
provider while the held send was still in flight, and that send landed in the next case's
epoch: the guilty case passed and an innocent one failed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderProcess
from harness import systems
from harness.clock import CLOCK_EPOCH, SharedClock, start_for_seed
from harness.engine.case.campaign import CampaignSettings, CaseSpec, run_campaign
from harness.engine.plan.workload import build_workload
from harness.errors import BadInputError
from harness.invariants import Status

SEED = 1
SLOW = {"fault": "slow", "delay_s": 1.5, "nth": 1, "times": 1}


def _on_chat(tmp_path: Path, *case_ids: str, **more: Any) -> Any:
    """The reference on the chat preset, seed ``SEED``, its work dir kept: the cases given."""
    return run_campaign(
        CampaignSettings(
            system=systems.resolve("reference"),
            seed=SEED,
            workdir=tmp_path,
            keep_workdir=True,
            provider_preset="chat",
            cases=[CaseSpec.parse(c) for c in case_ids],
            **more,
        )
    )


def _failing(result: Any) -> dict[str, dict[str, str]]:
    return {
        c.spec.id: {n: r.summary for n, r in c.invariants.items() if r.status is not Status.PASS}
        for c in result.cases
        if c.verdict is not Status.PASS
    }


def _effects(workdir: Path) -> list[tuple[int, int, str, str, str | None, float]]:
    conn = sqlite3.connect(workdir / "provider-effects.sqlite")
    try:
        return conn.execute(
            "SELECT seq, epoch, delivery_id, outcome, fault, received_at FROM effects"
            " WHERE epoch > 1 ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


def test_slow_chat_reply_with_a_rival_stays_in_its_case_and_the_reference_passes(
    tmp_path: Path,
) -> None:
    """Every case of the campaign holds its first send 1.5 s before the provider processes
    it; the race case is followed by two innocent baselines on the same provider."""
    faults = (*build_workload(SEED).provider_faults, SLOW)
    result = _on_chat(tmp_path, "concurrent_claim", "baseline", "baseline", provider_faults=faults)
    assert _failing(result) == {}
    effects = _effects(tmp_path)
    epochs = sorted({e[1] for e in effects})
    assert len(epochs) == len(result.cases), effects
    for epoch in epochs:
        mine = [e for e in effects if e[1] == epoch]
        # The case's own held send, exactly once, in its own epoch (none leaked in or out).
        assert [e[2] for e in mine if e[4] == "slow"] != [], (epoch, mine)
        assert len([e for e in mine if e[4] == "slow"]) == 1, (epoch, mine)
        accepted = [e[2] for e in mine if e[3] == "fresh"]
        assert sorted(accepted) == sorted(set(accepted)), (epoch, mine)
        assert len(accepted) == 6, (epoch, mine)
    for case in result.cases:
        # Nobody asked for a kill: every worker ran to its end.
        assert {w.kind.value for w in case.workers} == {"completed"}, case.spec.id


def test_a_case_does_not_wait_out_a_reply_held_past_its_workers(tmp_path: Path) -> None:
    """``provider_slow:30s`` holds a reply far past the worker's 1 s timeout and the drain's
    10 s: once every worker of the case is reaped, the harness's drain says no sender is
    left, the held reply goes, and the epoch drains instead of giving up; the reply's effect
    was logged when it was processed, so the case is judged on the same log."""
    result = _on_chat(tmp_path, "provider_slow:30s")
    assert _failing(result) == {}
    [case] = result.cases
    assert not [n for n in case.notes if "drain" in n], case.notes


def test_a_slow_reply_does_not_get_its_worker_killed(tmp_path: Path) -> None:
    """Without a liveness fault an overdue flag is recorded, never acted on."""
    result = _on_chat(tmp_path, "provider_timeout")
    assert _failing(result) == {}
    (case,) = result.cases
    assert [w.kind.value for w in case.workers] == ["completed"]
    assert not case.crash_fired


def test_provider_slow_fault_holds_the_first_send(tmp_path: Path) -> None:
    result = _on_chat(tmp_path, "provider_slow:1.5+concurrent_claim")
    assert _failing(result) == {}
    # provider_slow handles the send at once and holds its reply (a timeout rule that replies)
    slow = [e for e in _effects(tmp_path) if e[4] == "timeout"]
    assert len(slow) == 1
    assert slow[0][3] == "fresh"


def test_provider_hold_holds_the_first_send_before_processing_it(tmp_path: Path) -> None:
    """The request itself is held (logged ``slow`` when it lands); the case drains it, the
    reference reconciles after its timeout and backoff, and passes."""
    result = _on_chat(tmp_path, "provider_hold:1.5s+concurrent_claim")
    assert _failing(result) == {}
    held = [e for e in _effects(tmp_path) if e[4] == "slow"]
    assert len(held) == 1
    assert held[0][3] == "fresh"
    (case,) = result.cases
    assert all(r.landed for r in case.step_records)


@pytest.mark.parametrize("arg", ["x", "-1", "99999"])
def test_provider_slow_refuses_a_bad_hold(arg: str, tmp_path: Path) -> None:
    with pytest.raises(BadInputError):
        run_campaign(
            CampaignSettings(
                system=systems.resolve("reference"),
                seed=SEED,
                workdir=tmp_path,
                cases=[CaseSpec.parse(f"provider_slow:{arg}")],
            )
        )


def _readings(workdir: Path, case_slug: str) -> dict[str, list[Any]]:
    """Every clock reading a case left: provider received_at, ledger times."""
    ledger = sqlite3.connect(workdir / case_slug / f"{case_slug}.sqlite")
    try:
        return {
            "received_at": [
                (e[2], e[3], e[5])
                for e in _effects(workdir)
                if e[1] == max(x[1] for x in _effects(workdir))
            ],
            "executions": ledger.execute(
                "SELECT run_id, started_at, finished_at FROM executions ORDER BY run_id"
            ).fetchall(),
            "events": ledger.execute(
                "SELECT delivery_id, event, at FROM delivery_events ORDER BY event_id"
            ).fetchall(),
        }
    finally:
        ledger.close()


@pytest.mark.parametrize("case_id", ["baseline", "crash@after_provider_accept#1"])
def test_two_runs_of_a_case_see_the_same_clock_readings(case_id: str, tmp_path: Path) -> None:
    """Time is reproducible from the seed: a replay reads the same times everywhere."""
    seen = []
    for run in ("first", "replay"):
        workdir = tmp_path / run
        run_campaign(
            CampaignSettings(
                system=systems.resolve("reference"),
                seed=SEED,
                workdir=workdir,
                keep_workdir=True,
                cases=[CaseSpec.parse(case_id)],
            )
        )
        seen.append(_readings(workdir, CaseSpec.parse(case_id).slug))
    assert seen[0]["events"], seen[0]
    assert seen[0] == seen[1]
    start = start_for_seed(SEED)
    assert min(at for _, _, at in seen[0]["events"]) >= start >= CLOCK_EPOCH


def test_seeded_clock_moves_only_when_moved(tmp_path: Path) -> None:
    clock = SharedClock.create(str(tmp_path / "clock"), start=start_for_seed(3))
    first = clock.now()
    assert first == start_for_seed(3)
    assert clock.now() == first
    assert start_for_seed(3) != start_for_seed(4)
    clock.sleep_until(first + 60, autojump=True, cap_s=0.05)
    assert clock.now() == first + 60
    clock.sleep_until(first + 61, autojump=False, cap_s=0.01)  # slept 0.01 s for real
    assert clock.now() == pytest.approx(first + 60.01)
    clock.waited(1.0)
    assert clock.now() == pytest.approx(first + 61.01)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)


def test_harness_and_provider_read_the_same_clock_record(tmp_path: Path) -> None:
    from fake_providers import _clock
    from harness import clock as harness_clock

    reading = start_for_seed(5) + 0.25
    assert harness_clock.encode(reading) == _clock.encode(reading)
    clock = SharedClock.create(str(tmp_path / "clock"), start=reading)
    assert _clock.FileClock(str(clock.path)).now() == reading


# -- the provider side -----------------------------------------------------------------------


@pytest.fixture
def chat(tmp_path: Path) -> Any:
    with ProviderProcess.start(log_path=tmp_path / "log.sqlite", preset="chat") as provider:
        yield provider


def _send(
    provider: ProviderProcess, base: str, n: int = 0, *, timeout: float = 10
) -> requests.Response:
    body = {"destination": "#a", "run_id": "r", "delivery_id": f"d{n}", "body": f"hi {n}"}
    return requests.post(
        f"{base}/v1/messages", json=body, headers=provider.auth_headers(), timeout=timeout
    )


def test_a_stale_epoch_is_refused_and_logged_in_its_own_epoch(chat: ProviderProcess) -> None:
    old = chat.admin.reset()
    new = chat.admin.reset()
    resp = _send(chat, f"{chat.url}/epoch/{old}")
    assert resp.status_code == 410
    assert resp.json()["current_epoch"] == new
    assert chat.admin.effects() == []  # never counted in the current epoch
    (stale,) = chat.admin.effects(epoch=old)
    assert stale.outcome == "stale_epoch"
    assert stale.status_code == 410
    thread = requests.get(
        f"{chat.url}/epoch/{old}/v1/threads/%23a", headers=chat.auth_headers(), timeout=10
    )
    assert thread.status_code == 410
    assert _send(chat, f"{chat.url}/epoch/{new}").status_code == 200
    assert [e.outcome for e in chat.admin.effects()] == ["fresh"]


def test_a_drain_told_the_senders_are_gone_cuts_a_held_reply_but_not_a_held_send(
    chat: ProviderProcess,
) -> None:
    """A reply held after processing (a ``timeout`` fault) has its effect logged already:
    once the harness says no sender is left, the drain lets it go instead of waiting out the
    hold. A request held before processing (``slow``) still lands first: its effect is what
    the drain waits for. Without ``senders_gone`` a held reply is waited for as before."""
    epoch = chat.admin.reset([FaultRule(fault="timeout", hold_s=30.0, then="reply")])
    answers: list[int] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            _send(chat, f"{chat.url}/epoch/{epoch}", timeout=60).status_code
        )
    )
    sender.start()
    chat.admin.wait_in_flight(1)
    assert not chat.admin.drain(epoch, timeout_s=0.05)["drained"]  # the hold is still on
    drained = chat.admin.drain(epoch, timeout_s=10, senders_gone=True)
    assert drained["drained"], drained
    sender.join()
    assert answers == [200]
    assert [e.outcome for e in chat.admin.effects(epoch=epoch)] == ["fresh"]

    epoch = chat.admin.reset([FaultRule(fault="slow", delay_s=1.0)])
    answers.clear()
    sender = threading.Thread(
        target=lambda: answers.append(_send(chat, f"{chat.url}/epoch/{epoch}").status_code)
    )
    sender.start()
    chat.admin.wait_in_flight(1)
    assert chat.admin.drain(epoch, timeout_s=10, senders_gone=True)["drained"]
    # the held send was processed in its epoch before the drain said it was drained
    assert [e.outcome for e in chat.admin.effects(epoch=epoch)] == ["fresh"]
    sender.join()
    assert answers == [200]


def test_drain_waits_for_a_held_send_and_a_send_held_past_its_epoch_is_refused(
    chat: ProviderProcess,
) -> None:
    epoch = chat.admin.reset([FaultRule(fault="slow", delay_s=1.0)])
    answers: list[int] = []
    sender = threading.Thread(
        target=lambda: answers.append(_send(chat, f"{chat.url}/epoch/{epoch}").status_code)
    )
    sender.start()
    chat.admin.wait_in_flight(1)
    gave_up = chat.admin.drain(epoch, timeout_s=0.05)
    assert not gave_up["drained"]
    assert len(gave_up["in_flight"]) == 1
    drained = chat.admin.drain(epoch, timeout_s=5)
    assert drained["drained"]
    assert drained["waited_for"] == 1
    sender.join()
    assert answers == [200]

    # The same, but the epoch ends while the send is held: it is refused in its own epoch.
    epoch = chat.admin.reset([FaultRule(fault="slow", delay_s=1.0)])
    answers.clear()
    sender = threading.Thread(
        target=lambda: answers.append(_send(chat, f"{chat.url}/epoch/{epoch}").status_code)
    )
    sender.start()
    chat.admin.wait_in_flight(1)
    later = chat.admin.reset()
    assert chat.admin.drain(epoch, timeout_s=5)["drained"]
    sender.join()
    assert answers == [410]
    assert chat.admin.effects(epoch=later) == []
    assert [e.outcome for e in chat.admin.effects(epoch=epoch)] == ["stale_epoch"]


def test_a_slow_hold_ends_when_the_followed_clock_passes_it(
    chat: ProviderProcess, tmp_path: Path
) -> None:
    # An hour's hold: a send that waited for it on the real clock would outlast the sender's
    # 120 s timeout by far (so no wall-clock assertion is needed, nor one that load can break).
    clock = SharedClock.create(str(tmp_path / "clock"), start=start_for_seed(1))
    epoch = chat.admin.reset([FaultRule(fault="slow", delay_s=3600.0)], clock_path=clock.path)
    answers: list[int] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            _send(chat, f"{chat.url}/epoch/{epoch}", timeout=120).status_code
        )
    )
    sender.start()
    chat.admin.wait_in_flight(1)
    clock.advance(3601.0)  # a worker jumping to its retry, or the harness's restart gap
    # A reader after the move sees the held send landed (it is decided before the read).
    thread = requests.get(
        f"{chat.url}/epoch/{epoch}/v1/threads/%23a", headers=chat.auth_headers(), timeout=10
    )
    assert [m["text"] for m in thread.json()["messages"]] == ["hi 0"]
    sender.join()
    assert answers == [200]
    (effect,) = chat.admin.effects()
    assert effect.received_at == start_for_seed(1) + 3601.0  # stamped from the followed clock
    with pytest.raises(Exception, match="409"):
        chat.admin.advance_clock(1.0)  # the file is the clock now


def test_a_send_held_past_the_workers_end_is_drained_into_its_own_case(tmp_path: Path) -> None:
    """Held 3 s before processing, past the 1 s timeout and the 1 s backoff: the worker reads
    the thread, finds nothing and resends, and then the provider processes the first copy.
    That duplicate is real (real time would give the same order), so it must fail the case
    that made it, never the next one: the case waits for its epoch to drain."""
    result = _on_chat(tmp_path, "provider_hold:3s", "baseline")
    guilty, innocent = result.cases
    assert guilty.invariants["exactly_once_effect"].status is Status.FAIL
    assert innocent.verdict is Status.PASS, _failing(result)
    from harness.engine.store import trace

    drains = [
        ev.detail
        for ev in trace.read(tmp_path / guilty.spec.slug / "trace.jsonl")
        if ev.event == "provider_drain"
    ]
    assert drains == [
        {
            "epoch": drains[0]["epoch"],
            "drained": True,
            "waited_for": 1,
            "waited_s": drains[0]["waited_s"],
            "left": 0,
        }
    ]
