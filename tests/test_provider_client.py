"""The reference worker's provider adapter classifies every answer shape (in-process)."""

from __future__ import annotations

import requests
import responses

from harness.reference.provider_client import Answer, ProviderClient

URL = "http://provider.test"


def _client() -> ProviderClient:
    return ProviderClient(URL, "s3cret", timeout_s=1)


def _send(client: ProviderClient) -> Answer:
    result = client.send(
        key="k", destination="d", run_id="r", delivery_id="x", body="b", recognizer="c"
    )
    return result.answer


@responses.activate
def test_accepted_carries_the_provider_id_and_sends_key_and_credential() -> None:
    """A 200 is accepted; the request carried the key and the bearer credential."""
    responses.post(f"{URL}/v1/messages", json={"id": "msg_1", "status": "accepted"})
    client = _client()
    result = client.send(
        key="k1", destination="d", run_id="r", delivery_id="x", body="b", recognizer="c"
    )
    client.close()
    assert (result.answer, result.provider_message_id) == (Answer.ACCEPTED, "msg_1")
    sent = responses.calls[0].request
    assert sent.headers["Idempotency-Key"] == "k1"
    assert sent.headers["Authorization"] == "Bearer s3cret"


@responses.activate
def test_throttle_and_server_errors_are_retryable_with_retry_after() -> None:
    """429 honours Retry-After; 503 is retryable without it."""
    responses.post(f"{URL}/v1/messages", status=429, headers={"Retry-After": "3"})
    responses.post(f"{URL}/v1/messages", status=503)
    client = _client()
    first = client.send(
        key="k", destination="d", run_id="r", delivery_id="x", body="b", recognizer="c"
    )
    assert (first.answer, first.retry_after_s) == (Answer.RETRYABLE, 3.0)
    assert _send(client) is Answer.RETRYABLE
    client.close()


@responses.activate
def test_request_timeout_and_too_early_are_retryable() -> None:
    """408 and 425 ask to be asked again, as 429 does: a retry, not a failure."""
    responses.post(f"{URL}/v1/messages", status=408)
    responses.post(f"{URL}/v1/messages", status=425)
    client = _client()
    assert _send(client) is Answer.RETRYABLE
    assert _send(client) is Answer.RETRYABLE
    client.close()


@responses.activate
def test_other_client_errors_are_permanent() -> None:
    """A 403 or 422 will not get better by retrying."""
    responses.post(f"{URL}/v1/messages", status=403, json={"error": "out of scope"})
    client = _client()
    assert _send(client) is Answer.PERMANENT
    client.close()


@responses.activate
def test_dropped_connection_and_timeout_are_unknown() -> None:
    """No answer at all means the provider may have accepted: unknown, not failed."""
    responses.post(f"{URL}/v1/messages", body=requests.ConnectionError("reset"))
    responses.post(f"{URL}/v1/messages", body=requests.Timeout("slow"))
    client = _client()
    assert _send(client) is Answer.UNKNOWN
    assert _send(client) is Answer.UNKNOWN
    client.close()


@responses.activate
def test_lookup_found_missing_and_unreachable() -> None:
    """Lookup tells found, not found, and could-not-ask apart."""
    responses.get(f"{URL}/v1/messages", json={"id": "msg_9"})
    responses.get(f"{URL}/v1/messages", status=404)
    responses.get(f"{URL}/v1/messages", body=requests.ConnectionError("down"))
    client = _client()
    assert client.lookup("k").provider_message_id == "msg_9"
    missing = client.lookup("k")
    assert (missing.found, missing.error) == (False, None)
    assert client.lookup("k").error == "ConnectionError"
    client.close()
