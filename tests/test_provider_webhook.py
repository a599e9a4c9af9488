"""The webhook preset: a Standard Webhooks receiver with webhook-id dedupe on or off."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from fake_providers import ProviderProcess
from fake_providers.presets.webhook import sign

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def event(**overrides: Any) -> dict[str, Any]:
    """A delivery body, with any field overridden."""
    body = {
        "destination": "endpoint-1",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": "invoice.paid [ref ch-0123456789ab]",
    }
    body.update(overrides)
    return body


def deliver(
    provider: ProviderProcess, webhook_id: str, body: dict[str, Any] | None = None
) -> requests.Response:
    """POST one delivery with a bearer credential and ``webhook-id``."""
    headers = {**provider.auth_headers(), "webhook-id": webhook_id}
    payload = event() if body is None else body
    return requests.post(f"{provider.url}/v1/messages", json=payload, headers=headers, timeout=5)


def deliver_signed(
    provider: ProviderProcess, webhook_id: str, timestamp: int, secret: str = SECRET
) -> requests.Response:
    """POST one delivery signed the Standard Webhooks way (no bearer token)."""
    raw = json.dumps(event()).encode()
    headers = {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, webhook_id, timestamp, raw),
    }
    return requests.post(f"{provider.url}/v1/messages", data=raw, headers=headers, timeout=5)


def deliveries(provider: ProviderProcess) -> list[dict[str, Any]]:
    """What the receiver lists."""
    response = requests.get(
        f"{provider.url}/v1/deliveries", headers=provider.auth_headers(), timeout=5
    )
    assert response.status_code == 200
    found: list[dict[str, Any]] = response.json()["deliveries"]
    return found


def start(log: Any, **options: Any) -> ProviderProcess:
    """A webhook receiver whose signing secret is the worker credential."""
    return ProviderProcess.start(
        log_path=log, preset="webhook", credentials={"worker": (SECRET, ["*"])}, options=options
    )


@pytest.fixture(scope="module")
def deduping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """A receiver that honours webhook-id (one day window)."""
    with start(tmp_path_factory.mktemp("webhook") / "effects.sqlite") as provider:
        yield provider


@pytest.fixture
def provider(deduping: ProviderProcess) -> ProviderProcess:
    """The deduping receiver in a fresh epoch."""
    deduping.admin.reset()
    return deduping


def test_dedupe_on_acknowledges_a_repeat_without_processing_it(provider: ProviderProcess) -> None:
    """Same webhook-id twice: both 200, the second marked duplicate and not processed."""
    first = deliver(provider, "msg_1")
    again = deliver(provider, "msg_1")
    assert first.status_code == again.status_code == 200
    assert again.json() == {"received": True, "duplicate": True, "id": first.json()["id"]}
    assert [d["outcome"] for d in deliveries(provider)] == ["fresh", "deduplicated"]
    assert len(provider.admin.accepted()) == 1


def test_dedupe_off_processes_every_delivery(tmp_path: Any) -> None:
    """With the switch off, a retried webhook-id is processed twice."""
    with start(tmp_path / "naive.sqlite", dedupe=False) as provider:
        first = deliver(provider, "msg_1").json()
        again = deliver(provider, "msg_1").json()
        assert first["id"] != again["id"]
        assert "duplicate" not in again
        assert [d["outcome"] for d in deliveries(provider)] == ["fresh", "fresh"]
        provider.admin.assert_effects(2, outcome="fresh", idempotency_key="msg_1")


def test_webhook_id_expires_after_the_window(provider: ProviderProcess) -> None:
    """After the receiver's window the same id is processed again."""
    deliver(provider, "msg_1")
    provider.admin.advance_clock(86_400)
    assert "duplicate" not in deliver(provider, "msg_1").json()
    provider.admin.assert_effects(1, outcome="expired_then_accepted")


def test_signed_delivery_is_verified(provider: ProviderProcess) -> None:
    """A valid signature authenticates; a wrong secret or a stale timestamp is 401."""
    offset = provider.admin.advance_clock(0)
    now = int(time.time() + offset)
    assert deliver_signed(provider, "msg_1", now).status_code == 200
    assert deliver_signed(provider, "msg_2", now, secret="whsec_" + "A" * 32).status_code == 401
    assert deliver_signed(provider, "msg_3", now - 301).status_code == 401
    [accepted] = provider.admin.accepted()
    assert (accepted.credential_id, accepted.idempotency_key) == ("worker", "msg_1")
    provider.admin.assert_records(2, outcome="unauthenticated")


def test_missing_webhook_id_is_400(provider: ProviderProcess) -> None:
    """A delivery without webhook-id is refused."""
    response = requests.post(
        f"{provider.url}/v1/messages", json=event(), headers=provider.auth_headers(), timeout=5
    )
    assert response.status_code == 400
    assert provider.admin.accepted() == []
