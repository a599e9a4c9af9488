"""Injected faults: what the client sees for each kind, and what the log holds."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderError, ProviderProcess, body_hash


def message(**overrides: Any) -> dict[str, Any]:
    """A valid POST /v1/messages body, with any field overridden."""
    body = {
        "destination": "acct_1",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": "hello",
        "recognizer": "rec-1",
    }
    body.update(overrides)
    return body


def send(
    session: requests.Session,
    provider: ProviderProcess,
    key: str,
    body: dict[str, Any] | None = None,
) -> requests.Response:
    """POST one message as the default credential with Idempotency-Key ``key``."""
    headers = {**provider.auth_headers(), "Idempotency-Key": key}
    payload = message() if body is None else body
    return session.post(f"{provider.url}/v1/messages", json=payload, headers=headers, timeout=5)


@pytest.fixture(scope="module")
def shared_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """One provider for the module; tests isolate themselves with a fresh epoch."""
    log = tmp_path_factory.mktemp("provider") / "effects.sqlite"
    with ProviderProcess.start(log_path=log) as provider:
        yield provider


@pytest.fixture
def provider(shared_provider: ProviderProcess) -> ProviderProcess:
    """The shared provider, reset to a new epoch with no faults."""
    shared_provider.admin.reset()
    return shared_provider


@pytest.fixture
def session() -> Iterator[requests.Session]:
    """A worker-side HTTP session, closed afterwards."""
    with requests.Session() as s:
        yield s


def test_accept_then_drop_commits_then_cuts_connection(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """The client gets a ConnectionError, yet the log holds the accepted effect."""
    provider.admin.set_faults([FaultRule(fault="accept_then_drop")])
    with pytest.raises(requests.ConnectionError):
        send(session, provider, "k1")
    [effect] = provider.admin.accepted()
    assert (effect.outcome, effect.fault, effect.status_code) == (
        "fresh",
        "accept_then_drop",
        200,
    )
    assert effect.provider_message_id is not None


def test_retry_after_drop_gets_replayed_200_with_same_id(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Retrying a dropped request with the same key replays the undelivered 200."""
    provider.admin.set_faults([FaultRule(fault="accept_then_drop")])
    with pytest.raises(requests.ConnectionError):
        send(session, provider, "k1")
    retry = send(session, provider, "k1")
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    [effect] = provider.admin.accepted()
    assert retry.json() == {
        "id": effect.provider_message_id,
        "status": "accepted",
        "destination": "acct_1",
    }
    [replay] = provider.admin.assert_records(1, outcome="deduplicated")
    assert replay.fault is None
    assert provider.admin.effects(fault="accept_then_drop") == [effect]


def test_server_keeps_serving_after_many_drops(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Dropping connections repeatedly leaves the server healthy and its stderr quiet."""
    provider.admin.set_faults([FaultRule(fault="accept_then_drop", times=None)])
    for i in range(5):
        with pytest.raises(requests.ConnectionError):
            send(session, provider, f"k{i}")
    provider.admin.clear_faults()
    assert send(session, provider, "after").status_code == 200
    assert len(provider.admin.accepted()) == 6
    assert provider.admin.health()["ok"] is True
    assert "Traceback" not in provider.stderr_path.read_text()


def test_status_503_creates_nothing_and_forgets_key(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A status fault replies 503, logs `failed_by_fault`, and a retry is processed fresh."""
    provider.admin.set_faults([FaultRule(fault="status", status=503)])
    failed = send(session, provider, "k1")
    assert failed.status_code == 503
    assert "Retry-After" not in failed.headers
    [record] = provider.admin.assert_records(1, outcome="failed_by_fault")
    assert (record.fault, record.status_code, record.provider_message_id) == ("status", 503, None)
    assert provider.admin.accepted() == []
    retry = send(session, provider, "k1")
    assert retry.status_code == 200
    assert "Idempotent-Replayed" not in retry.headers
    provider.admin.assert_effects(1, outcome="fresh")


def test_status_429_carries_retry_after(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A 429 fault with retry_after sends a Retry-After header."""
    provider.admin.set_faults([FaultRule(fault="status", status=429, retry_after=1)])
    response = send(session, provider, "k1")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"
    [record] = provider.admin.assert_records(1, outcome="failed_by_fault")
    assert record.retry_after == 1  # the log keeps it: a retry can be judged against it


def test_the_log_keeps_the_body_hash_in_its_normal_form(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Each record carries the hash of the message text in its normal form: the text the
    ledger recorded, re-spelled with CRLF and trailing blanks, hashes the same; another does not."""
    sent = {**message(), "body": "Hello\r\nthere  \n\n"}
    assert send(session, provider, "k1", sent).status_code == 200
    [record] = provider.admin.accepted()
    assert record.body_hash == body_hash("Hello\nthere")
    assert record.body_hash != body_hash("Hello\nsomeone else")


def test_nth_and_times_pick_which_requests_fail(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """nth=2, times=2 fails the 2nd and 3rd matching requests only."""
    provider.admin.set_faults([FaultRule(fault="status", status=503, nth=2, times=2)])
    codes = [send(session, provider, f"k{i}").status_code for i in range(5)]
    assert codes == [200, 503, 503, 200, 200]


def test_match_limits_rule_and_its_counter(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Only requests matching the rule's fields count towards nth or get the fault."""
    rule = FaultRule(fault="status", status=503, match={"run_id": "run-x"}, nth=2)
    provider.admin.set_faults([rule])
    other = message(run_id="run-y")
    target = message(run_id="run-x")
    codes = [
        send(session, provider, "a", target).status_code,
        send(session, provider, "b", other).status_code,
        send(session, provider, "c", other).status_code,
        send(session, provider, "d", target).status_code,
        send(session, provider, "e", target).status_code,
    ]
    assert codes == [200, 200, 200, 503, 200]


def test_first_applicable_rule_wins(provider: ProviderProcess, session: requests.Session) -> None:
    """With two rules, each request gets the first rule whose nth/times window covers it."""
    provider.admin.set_faults(
        [
            FaultRule(fault="status", status=503, nth=1),
            FaultRule(fault="status", status=429, nth=1, times=2),
        ]
    )
    codes = [send(session, provider, f"k{i}").status_code for i in range(3)]
    assert codes == [503, 429, 200]


def test_reset_and_clear_remove_faults(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Both DELETE /_admin/faults and reset disarm every rule."""
    provider.admin.set_faults([FaultRule(fault="status", status=503, times=None)])
    provider.admin.clear_faults()
    assert send(session, provider, "k1").status_code == 200
    provider.admin.set_faults([FaultRule(fault="status", status=503, times=None)])
    provider.admin.reset()
    assert send(session, provider, "k1").status_code == 200


def test_fault_rule_json_round_trip() -> None:
    """A rule survives to_json/from_json unchanged."""
    rule = FaultRule(
        fault="status", status=429, retry_after=2, match={"destination": "acct_1"}, nth=3
    )
    assert FaultRule.from_json(rule.to_json()) == rule
    assert rule.to_json() == {
        "fault": "status",
        "status": 429,
        "retry_after": 2,
        "match": {"destination": "acct_1"},
        "nth": 3,
        "times": 1,
    }


@pytest.mark.parametrize(
    "rule",
    [
        {"fault": "explode"},
        {"fault": "status"},
        {"fault": "status", "status": 503, "nth": 0},
        {"fault": "status", "status": 503, "times": 0},
        {"fault": "accept_then_drop", "match": {"body": "x"}},
        {"fault": "accept_then_drop", "colour": "red"},
    ],
)
def test_bad_fault_rules_are_refused(provider: ProviderProcess, rule: dict[str, Any]) -> None:
    """The server answers 400 to an invalid rule, surfaced as ProviderError."""
    response = requests.post(
        f"{provider.url}/_admin/faults",
        json={"rules": [rule]},
        headers={"X-Admin-Token": provider.admin_token},
        timeout=5,
    )
    assert response.status_code == 400
    with pytest.raises(ProviderError):
        FaultRule.from_json(rule)


def test_timeout_holds_the_reply_past_the_client_timeout(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """The client times out; the log already holds the accepted effect."""
    provider.admin.set_faults([FaultRule(fault="timeout", hold_s=2.0)])
    headers = {**provider.auth_headers(), "Idempotency-Key": "k1"}
    with pytest.raises(requests.ReadTimeout):
        session.post(f"{provider.url}/v1/messages", json=message(), headers=headers, timeout=0.3)
    [effect] = provider.admin.accepted()
    assert (effect.outcome, effect.fault) == ("fresh", "timeout")


def test_timeout_then_reply_arrives_late_and_then_drop_never_arrives(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """hold_s then reply: a patient client gets the 200 late; then drop: it gets no reply."""
    provider.admin.set_faults(
        [
            FaultRule(fault="timeout", hold_s=0.2, then="reply", match={"idempotency_key": "a"}),
            FaultRule(fault="timeout", hold_s=0.2, then="drop", match={"idempotency_key": "b"}),
        ]
    )
    started = time.monotonic()
    late = send(session, provider, "a")
    assert late.status_code == 200
    assert time.monotonic() - started >= 0.2
    with pytest.raises(requests.ConnectionError):
        send(session, provider, "b")
    assert [(e.idempotency_key, e.fault) for e in provider.admin.accepted()] == [
        ("a", "timeout"),
        ("b", "timeout"),
    ]


def test_slow_delays_before_processing_then_answers_normally(
    provider: ProviderProcess,
) -> None:
    """While a slow request is held nothing is logged; then it is accepted as usual."""
    provider.admin.set_faults([FaultRule(fault="slow", delay_s=0.5)])
    with ThreadPoolExecutor(max_workers=1) as pool, requests.Session() as s:
        pending = pool.submit(send, s, provider, "k1")
        [flight] = provider.admin.wait_in_flight(1)
        assert flight["stage"] == "slow"
        assert provider.admin.effects() == []
        response = pending.result()
    assert response.status_code == 200
    [effect] = provider.admin.accepted()
    assert (effect.fault, effect.provider_message_id) == ("slow", response.json()["id"])


def test_fault_targets_one_key_and_its_nth_attempt(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """match on key + nth=2 fails exactly the second attempt with that key."""
    rule = FaultRule(fault="status", status=503, match={"idempotency_key": "k1"}, nth=2)
    provider.admin.set_faults([rule])
    codes = [send(session, provider, key).status_code for key in ("k1", "k2", "k1", "k1")]
    assert codes == [200, 200, 503, 200]
    assert [e.outcome for e in provider.admin.effects(idempotency_key="k1")] == [
        "fresh",
        "failed_by_fault",
        "deduplicated",
    ]


def test_fault_targets_a_destination(provider: ProviderProcess, session: requests.Session) -> None:
    """match on destination leaves other destinations alone."""
    provider.admin.set_faults(
        [FaultRule(fault="accept_then_drop", match={"destination": "acct_2"}, times=None)]
    )
    assert send(session, provider, "a").status_code == 200
    with pytest.raises(requests.ConnectionError):
        send(session, provider, "b", message(destination="acct_2"))
    assert len(provider.admin.accepted()) == 2


def test_probability_with_a_seed_is_deterministic(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A seeded probability faults the same requests every time, as random.Random(seed) says."""
    rule = FaultRule(fault="status", status=503, probability=0.5, seed=7, times=None)
    dice = random.Random(7)
    expected = [503 if dice.random() < 0.5 else 200 for _ in range(12)]
    provider.admin.set_faults([rule])
    first = [send(session, provider, f"k{i}").status_code for i in range(12)]
    provider.admin.reset()
    provider.admin.set_faults([rule])
    second = [send(session, provider, f"k{i}").status_code for i in range(12)]
    assert first == second == expected
    assert 0 < expected.count(503) < 12
    assert provider.admin.count(outcome="failed_by_fault") == expected.count(503)


@pytest.mark.parametrize(
    "rule",
    [
        {"fault": "timeout"},
        {"fault": "timeout", "hold_s": 1, "then": "explode"},
        {"fault": "slow"},
        {"fault": "slow", "delay_s": 1, "hold_s": 1},
        {"fault": "status", "status": 503, "delay_s": 1},
        {"fault": "accept_then_drop", "retry_after": 1},
        {"fault": "status", "status": 503, "probability": 0},
        {"fault": "status", "status": 503, "probability": 1.5},
        {"fault": "status", "status": 503, "seed": 3},
    ],
)
def test_bad_timing_and_probability_rules_are_refused(rule: dict[str, Any]) -> None:
    """Timing fields belong to their fault kind; probability is in (0, 1] and owns the seed."""
    with pytest.raises(ProviderError):
        FaultRule.from_json(rule)


def test_new_fault_fields_round_trip() -> None:
    """timeout/slow/probability rules survive to_json/from_json unchanged."""
    rules = [
        FaultRule(fault="timeout", hold_s=1.5, then="drop"),
        FaultRule(fault="slow", delay_s=0.25, match={"delivery_id": "d-1"}),
        FaultRule(fault="status", status=429, retry_after=3, probability=0.25, seed=1, times=None),
    ]
    for rule in rules:
        assert FaultRule.from_json(rule.to_json()) == rule
