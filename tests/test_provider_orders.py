"""The orders preset's PayPal-like semantics: replay when done, 409 while in flight, window."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderProcess, ProviderStartError

SIX_HOURS = 6 * 3600.0
SLOW_S = 0.8


def message(**overrides: Any) -> dict[str, Any]:
    """A valid order message, with any field overridden."""
    body = {
        "destination": "shop_1",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": "order [ref ch-0123456789ab]",
    }
    body.update(overrides)
    return body


def send(
    provider: ProviderProcess,
    request_id: str,
    body: dict[str, Any] | None = None,
    credential: str = "worker",
) -> requests.Response:
    """POST one order with PayPal-Request-Id ``request_id`` (a fresh connection)."""
    headers = {**provider.auth_headers(credential), "PayPal-Request-Id": request_id}
    payload = message() if body is None else body
    return requests.post(f"{provider.url}/v1/messages", json=payload, headers=headers, timeout=10)


def start(tmp_path: Path, **options: Any) -> ProviderProcess:
    """An orders provider with two tenants and ``options``."""
    credentials = {"worker": ("w-" + "a" * 30, ["*"]), "other": ("o-" + "b" * 30, ["*"])}
    return ProviderProcess.start(
        log_path=tmp_path / "orders.sqlite",
        preset="orders",
        credentials=credentials,
        options=options,
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """One orders provider (default options) for the module."""
    with start(tmp_path_factory.mktemp("orders")) as provider:
        yield provider


@pytest.fixture
def provider(shared: ProviderProcess) -> ProviderProcess:
    """The shared provider in a fresh epoch."""
    shared.admin.reset()
    return shared


def test_repeat_after_completion_returns_the_original_order(provider: ProviderProcess) -> None:
    """201 then 200 with the same order id, whatever the repeat's body says."""
    first = send(provider, "req-1")
    again = send(provider, "req-1", message(body="changed"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert again.headers["PayPal-Request-Id"] == "req-1"
    assert [e.outcome for e in provider.admin.effects()] == ["fresh", "deduplicated"]
    assert provider.admin.count(outcome="fresh") == 1


def test_repeat_while_first_in_flight_gets_409(provider: ProviderProcess) -> None:
    """While the first request is still being processed, the same id is refused with 409."""
    provider.admin.set_faults([FaultRule(fault="slow", delay_s=SLOW_S)])
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(send, provider, "req-1")
        [flight] = provider.admin.wait_in_flight(1)
        assert (flight["idempotency_key"], flight["stage"]) == ("req-1", "slow")
        conflict = send(provider, "req-1")
        first = pending.result()
    assert conflict.status_code == 409
    assert conflict.json()["name"] == "RESOURCE_CONFLICT"
    assert first.status_code == 201
    assert send(provider, "req-1").json()["id"] == first.json()["id"]
    records = provider.admin.effects()
    assert [(e.outcome, e.status_code) for e in records] == [
        ("rejected", 409),
        ("fresh", 201),
        ("deduplicated", 200),
    ]
    assert records[1].fault == "slow"


def test_in_flight_conflict_off_serialises_the_repeat(tmp_path: Path) -> None:
    """With the switch off, a repeat during the first request wins and the first replays it."""
    with start(tmp_path, in_flight_conflict=False) as provider:
        provider.admin.set_faults([FaultRule(fault="slow", delay_s=SLOW_S)])
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(send, provider, "req-1")
            provider.admin.wait_in_flight(1)
            repeat = send(provider, "req-1")
            first = pending.result()
        assert repeat.status_code == 201
        assert first.status_code == 200
        assert first.json()["id"] == repeat.json()["id"]
        assert provider.admin.count(outcome="fresh") == 1


def test_request_id_expires_after_six_hours(provider: ProviderProcess) -> None:
    """The default retention is 6 h on the provider clock; after it the id is a new order."""
    first = send(provider, "req-1").json()["id"]
    provider.admin.advance_clock(SIX_HOURS - 1)
    assert send(provider, "req-1").json()["id"] == first
    provider.admin.advance_clock(1)
    late = send(provider, "req-1")
    assert late.status_code == 201
    assert late.json()["id"] != first
    provider.admin.assert_effects(1, outcome="expired_then_accepted", idempotency_key="req-1")


def test_lookup_by_request_id_is_per_tenant(provider: ProviderProcess) -> None:
    """The caller finds its order by request id; another tenant gets 404."""
    order = send(provider, "req-1").json()

    def lookup(credential: str) -> requests.Response:
        return requests.get(
            f"{provider.url}/v1/messages",
            params={"request_id": "req-1"},
            headers=provider.auth_headers(credential),
            timeout=5,
        )

    mine = lookup("worker")
    assert mine.status_code == 200
    assert mine.json()["id"] == order["id"]
    assert mine.json()["request_id"] == "req-1"
    assert lookup("other").status_code == 404


def test_missing_request_id_is_400(provider: ProviderProcess) -> None:
    """Without PayPal-Request-Id the order is refused and nothing is created."""
    response = requests.post(
        f"{provider.url}/v1/messages", json=message(), headers=provider.auth_headers(), timeout=5
    )
    assert response.status_code == 400
    assert provider.admin.accepted() == []


def test_window_is_configurable_up_to_72_hours(tmp_path: Path) -> None:
    """window_s above 72 h is refused before anything starts."""
    with pytest.raises(ProviderStartError, match="must be <= 259200"):
        start(tmp_path, window_s=73 * 3600)
