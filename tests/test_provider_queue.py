"""The queue-fifo preset's SQS FIFO semantics: duplicates succeed but are not delivered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderProcess

WINDOW_S = 300.0


def message(**overrides: Any) -> dict[str, Any]:
    """A valid queue message, with any field overridden."""
    body = {
        "destination": "jobs.fifo",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": "job [ref ch-0123456789ab]",
    }
    body.update(overrides)
    return body


def send(
    provider: ProviderProcess, dedupe_id: str | None, body: dict[str, Any] | None = None
) -> requests.Response:
    """SendMessage with MessageDeduplicationId ``dedupe_id`` (None: no header)."""
    headers = provider.auth_headers()
    if dedupe_id is not None:
        headers["MessageDeduplicationId"] = dedupe_id
    payload = message() if body is None else body
    return requests.post(f"{provider.url}/v1/messages", json=payload, headers=headers, timeout=5)


def receive(provider: ProviderProcess, queue: str = "jobs.fifo") -> list[dict[str, Any]]:
    """Consume everything waiting in ``queue``."""
    response = requests.post(
        f"{provider.url}/v1/queues/{queue}/receive", headers=provider.auth_headers(), timeout=5
    )
    assert response.status_code == 200
    messages: list[dict[str, Any]] = response.json()["Messages"]
    return messages


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """One queue-fifo provider (default 5 min interval) for the module."""
    log = tmp_path_factory.mktemp("queue") / "effects.sqlite"
    with ProviderProcess.start(log_path=log, preset="queue-fifo") as provider:
        yield provider


@pytest.fixture
def provider(shared: ProviderProcess) -> ProviderProcess:
    """The shared provider in a fresh epoch."""
    shared.admin.reset()
    return shared


def test_duplicate_is_answered_as_success_and_not_delivered(provider: ProviderProcess) -> None:
    """Same id within 5 min: 200 with the same MessageId, even with another body; one delivery."""
    first = send(provider, "dup-1")
    again = send(provider, "dup-1", message(body="a different body"))
    assert first.status_code == again.status_code == 200
    assert again.json()["MessageId"] == first.json()["MessageId"]
    [delivered] = receive(provider)
    assert delivered["MessageId"] == first.json()["MessageId"]
    assert delivered["Body"] == "job [ref ch-0123456789ab]"
    assert receive(provider) == []
    assert [e.outcome for e in provider.admin.effects()] == ["fresh", "deduplicated"]


def test_id_is_remembered_after_the_message_is_consumed(provider: ProviderProcess) -> None:
    """Receiving (and so deleting) a message does not free its id within the interval."""
    send(provider, "dup-1")
    assert len(receive(provider)) == 1
    assert send(provider, "dup-1").status_code == 200
    assert receive(provider) == []
    provider.admin.assert_records(1, outcome="deduplicated")


def test_after_the_interval_the_id_is_a_new_message(provider: ProviderProcess) -> None:
    """After a clock jump past 5 min the same id is delivered again (expired_then_accepted)."""
    first = send(provider, "dup-1").json()["MessageId"]
    provider.admin.advance_clock(WINDOW_S)
    second = send(provider, "dup-1").json()["MessageId"]
    assert second != first
    assert [m["MessageId"] for m in receive(provider)] == [first, second]
    provider.admin.assert_effects(1, outcome="expired_then_accepted")


def test_ids_are_scoped_to_the_queue(provider: ProviderProcess) -> None:
    """The same id on two queues is two messages."""
    send(provider, "dup-1")
    send(provider, "dup-1", message(destination="other.fifo"))
    assert provider.admin.count(outcome="fresh") == 2


def test_there_is_no_lookup(provider: ProviderProcess) -> None:
    """A worker cannot ask whether an id was seen: GET /v1/messages is 405."""
    send(provider, "dup-1")
    response = requests.get(
        f"{provider.url}/v1/messages",
        params={"idempotency_key": "dup-1"},
        headers=provider.auth_headers(),
        timeout=5,
    )
    assert response.status_code == 405


def test_missing_id_is_400_without_content_based_dedup(provider: ProviderProcess) -> None:
    """Without an id and without content-based dedup the send is refused."""
    response = send(provider, None)
    assert response.status_code == 400
    assert "InvalidParameterValue" in response.json()["error"]
    assert provider.admin.accepted() == []


def test_content_based_dedup_uses_the_body_hash(tmp_path: Path) -> None:
    """With content_based_dedup, the same body without an id is a duplicate."""
    options = {"content_based_dedup": True}
    log = tmp_path / "q.sqlite"
    with ProviderProcess.start(log_path=log, preset="queue-fifo", options=options) as provider:
        first = send(provider, None).json()["MessageId"]
        assert send(provider, None).json()["MessageId"] == first
        send(provider, None, message(body="another body"))
        assert len(receive(provider)) == 2
        [dup] = provider.admin.assert_records(1, outcome="deduplicated")
        assert dup.idempotency_key is not None
        assert len(dup.idempotency_key) == 64


def test_dropped_send_retried_with_same_id_is_delivered_once(provider: ProviderProcess) -> None:
    """accept_then_drop: the client sees no reply; a retry within the interval dedupes."""
    provider.admin.set_faults([FaultRule(fault="accept_then_drop")])
    with pytest.raises(requests.ConnectionError):
        send(provider, "dup-1")
    retry = send(provider, "dup-1")
    assert retry.status_code == 200
    assert len(receive(provider)) == 1
    [accepted] = provider.admin.accepted()
    assert (accepted.fault, accepted.provider_message_id) == (
        "accept_then_drop",
        retry.json()["MessageId"],
    )
