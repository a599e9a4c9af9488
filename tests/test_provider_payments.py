"""The payments preset's Stripe-like semantics: saved errors, mismatch, window, switches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from fake_providers import ProviderProcess

WINDOW_S = 60.0


def message(**overrides: Any) -> dict[str, Any]:
    """A valid payments message, with any field overridden."""
    body = {
        "destination": "acct_1",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": "paid [ref ch-0123456789ab]",
        "recognizer": "ch-0123456789ab",
    }
    body.update(overrides)
    return body


def send(
    session: requests.Session, provider: ProviderProcess, key: str, body: dict[str, Any]
) -> requests.Response:
    """POST one message with Idempotency-Key ``key``."""
    headers = {**provider.auth_headers(), "Idempotency-Key": key}
    return session.post(f"{provider.url}/v1/messages", json=body, headers=headers, timeout=5)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """A payments provider with a 60 s window that declines acct_declined*."""
    log = tmp_path_factory.mktemp("payments") / "effects.sqlite"
    options = {"window_s": WINDOW_S, "decline": ["acct_declined*"]}
    with ProviderProcess.start(log_path=log, options=options) as provider:
        yield provider


@pytest.fixture
def provider(shared: ProviderProcess) -> ProviderProcess:
    """The shared provider in a fresh epoch."""
    shared.admin.reset()
    return shared


@pytest.fixture
def session() -> Iterator[requests.Session]:
    """A worker-side HTTP session."""
    with requests.Session() as s:
        yield s


def test_decline_is_saved_and_replayed_byte_for_byte(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A declined first request is the key's answer: the retry replays the same 402."""
    body = message(destination="acct_declined_9")
    first = send(session, provider, "k1", body)
    again = send(session, provider, "k1", body)
    assert first.status_code == again.status_code == 402
    assert first.json()["error"]["code"] == "card_declined"
    assert again.content == first.content
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    [declined] = provider.admin.assert_records(1, outcome="rejected")
    [replayed] = provider.admin.assert_records(1, outcome="deduplicated")
    assert declined.status_code == replayed.status_code == 402
    assert provider.admin.accepted() == []


def test_same_key_other_parameters_is_rejected_and_original_kept(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A key reused with another payload gets 422; the original keeps being replayed."""
    first = send(session, provider, "k1", message())
    mismatch = send(session, provider, "k1", message(body="other text"))
    assert mismatch.status_code == 422
    assert mismatch.json()["error"] == "idempotency key reused with different parameters"
    # The near miss names the rule and the parameter that differed, first and now.
    assert mismatch.json()["reason"] == (
        "idempotency_error: key 'k1' was first used with other parameters (rule: same key,"
        " same endpoint and parameters); differs in: body"
        " (first 'paid [ref ch-0123456789ab]', now 'other text')"
    )
    [rejected] = provider.admin.assert_records(1, outcome="rejected")
    assert rejected.reason == mismatch.json()["reason"]
    again = send(session, provider, "k1", message())
    assert again.content == first.content
    outcomes = [e.outcome for e in provider.admin.effects()]
    assert outcomes == ["fresh", "rejected", "deduplicated"]


def test_key_expires_after_clock_jump(provider: ProviderProcess, session: requests.Session) -> None:
    """Within the window a repeat is replayed; after a clock jump it is a second charge."""
    first = send(session, provider, "k1", message()).json()["id"]
    provider.admin.advance_clock(WINDOW_S - 1)
    assert send(session, provider, "k1", message()).headers["Idempotent-Replayed"] == "true"
    provider.admin.advance_clock(1)
    late = send(session, provider, "k1", message())
    assert late.status_code == 200
    assert late.json()["id"] != first
    [expired] = provider.admin.assert_effects(1, outcome="expired_then_accepted")
    assert expired.provider_message_id == late.json()["id"]
    assert len(provider.admin.accepted(idempotency_key="k1")) == 2


def test_switches_turn_off_error_replay_and_lookup_and_change_mismatch_status(
    tmp_path: Any, session: requests.Session
) -> None:
    """replay_errors=false re-declines afresh, lookup=false is 404, mismatch_status is used."""
    options = {
        "decline": ["acct_declined*"],
        "replay_errors": False,
        "lookup": False,
        "mismatch_status": 400,
    }
    with ProviderProcess.start(log_path=tmp_path / "e.sqlite", options=options) as provider:
        declined = message(destination="acct_declined_1")
        codes = [send(session, provider, "d", declined) for _ in range(2)]
        assert [r.status_code for r in codes] == [402, 402]
        assert "Idempotent-Replayed" not in codes[1].headers
        provider.admin.assert_records(2, outcome="rejected", idempotency_key="d")
        assert send(session, provider, "k", message()).status_code == 200
        assert send(session, provider, "k", message(body="x")).status_code == 400
        found = session.get(
            f"{provider.url}/v1/messages",
            params={"idempotency_key": "k"},
            headers=provider.auth_headers(),
            timeout=5,
        )
        assert found.status_code == 404
        info = provider.admin.info()
        assert info["preset"] == "payments"
        assert info["options"]["lookup"] is False


def _ids_of_a_session(log: Any, restart_after: int | None = None) -> list[str]:
    """Message ids a fresh payments provider hands out for one fixed request sequence (three
    keys, one of them sent again after its window), restarting it mid-way if asked."""
    ids: list[str] = []
    with (
        ProviderProcess.start(log_path=log, options={"window_s": 0.0}) as provider,
        requests.Session() as s,
    ):
        for n, key in enumerate(["k-a", "k-b", "k-a", "k-c"]):
            if n == restart_after:
                provider.restart()
            reply = send(s, provider, key, message(delivery_id=f"d-{key}"))
            assert reply.status_code == 200, reply.text
            ids.append(reply.json()["id"])
    return ids


def test_message_ids_follow_the_requests_not_a_random_source(tmp_path: Any) -> None:
    first = _ids_of_a_session(tmp_path / "one.sqlite")
    assert first == _ids_of_a_session(tmp_path / "two.sqlite")  # same requests, same ids
    assert len(set(first)) == 4  # k-a sent again past its window is a new effect, a new id
    restarted = _ids_of_a_session(tmp_path / "three.sqlite", restart_after=2)
    assert len(set(restarted)) == 4, restarted  # a restarted provider never re-mints an id
