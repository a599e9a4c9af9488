"""The reference worker's provider adapters, one per preset: answer shapes and reconcile.

HTTP presets run in-process against ``responses``; SMTP runs against the real fake provider
(aiosmtpd on loopback), since its answers are SMTP replies and socket cuts.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import responses

from fake_providers import FaultRule, ProviderProcess
from harness.engine.store._db import DatabaseTarget
from harness.errors import BadInputError
from harness.reference import adapters
from harness.reference.adapters import ReconcileTarget, make_adapter
from harness.reference.adapters.chat import ChatAdapter
from harness.reference.adapters.payments import PaymentsAdapter
from harness.reference.adapters.queue_fifo import QueueFifoAdapter
from harness.reference.adapters.smtp import SmtpAdapter
from harness.reference.provider_client import Answer
from harness.worker_config import WorkerConfig

URL = "http://provider.test"
REC = "ch-0123456789ab"
TARGET = ReconcileTarget(
    key="key-1", destination="alice@example.com", run_id="run-1", delivery_id="d-1", recognizer=REC
)
BODY = f"Done.\n\n[ref {REC}]"


def _send(adapter: adapters.ProviderAdapter, *, key: str = "key-1") -> tuple[Answer, str | None]:
    result = adapter.send(
        key=key,
        destination="alice@example.com",
        run_id="run-1",
        delivery_id="d-1",
        body=BODY,
        recognizer=REC,
    )
    return result.answer, result.provider_message_id


def _config(preset: str, **extra: object) -> WorkerConfig:
    return WorkerConfig(
        db=DatabaseTarget(url="sqlite://"),
        provider_url=URL,
        credential_id="worker",
        credential_secret="s3cret",
        destination_scope="*",
        worker_name="w0",
        provider_preset=preset,
        **extra,  # type: ignore[arg-type]
    )


# -- choosing an adapter ------------------------------------------------------------------


def test_the_preset_chooses_the_adapter_and_its_window() -> None:
    """payments keeps its configured window; queue-fifo never relies on more than 5 min."""
    pay = make_adapter(_config("payments", key_window_s=3600.0))
    queue = make_adapter(_config("queue-fifo"))  # the 24 h default must not leak through
    chat = make_adapter(_config("chat"))
    try:
        assert isinstance(pay, PaymentsAdapter)
        assert pay.key_window_s == 3600.0
        assert isinstance(queue, QueueFifoAdapter)
        assert queue.key_window_s == 300.0
        assert isinstance(chat, ChatAdapter)
        assert chat.key_window_s is None
        assert (pay.can_reconcile, queue.can_reconcile, chat.can_reconcile) == (True, False, True)
    finally:
        for a in (pay, queue, chat):
            a.close()
    assert [adapters.has_lookup(p) for p in adapters.PRESETS] == [True, False, False, False]
    with pytest.raises(BadInputError, match="smtp_port"):
        make_adapter(_config("smtp"))
    with pytest.raises(BadInputError, match="no adapter"):
        make_adapter(_config("webhook"))


def test_worker_config_carries_preset_and_smtp_port_through_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config("smtp", provider_smtp_port=2525)
    for name, value in config.to_env().items():
        monkeypatch.setenv(name, value)
    back = WorkerConfig.from_env()
    assert (back.provider_preset, back.provider_smtp_port) == ("smtp", 2525)


def test_smtp_faults_are_restated_as_smtp_codes() -> None:
    """The default workload's 503 becomes a 451 (try again later) on SMTP only."""
    rules = ({"fault": "status", "status": 503, "nth": 1}, {"fault": "accept_then_drop"})
    assert adapters.campaign_faults("smtp", rules) == (
        {"fault": "status", "status": 451, "nth": 1},
        {"fault": "accept_then_drop"},
    )
    assert adapters.campaign_faults("chat", rules) == rules


# -- payments -----------------------------------------------------------------------------


@responses.activate
def test_payments_sends_the_key_and_reconciles_by_lookup() -> None:
    responses.post(f"{URL}/v1/messages", json={"id": "msg_1", "status": "accepted"})
    responses.get(f"{URL}/v1/messages", json={"id": "msg_1", "status": "accepted"})
    responses.get(f"{URL}/v1/messages", status=404)
    adapter = PaymentsAdapter(URL, "s3cret", timeout_s=1)
    assert _send(adapter) == (Answer.ACCEPTED, "msg_1")
    assert responses.calls[0].request.headers["Idempotency-Key"] == "key-1"
    found = adapter.reconcile(TARGET)
    assert (found.found, found.provider_message_id) == (True, "msg_1")
    assert "idempotency_key=key-1" in str(responses.calls[1].request.url)
    missing = adapter.reconcile(TARGET)
    assert (missing.found, missing.error, missing.conclusive) == (False, None, True)
    adapter.close()


# -- queue-fifo ---------------------------------------------------------------------------


@responses.activate
def test_queue_fifo_dedup_id_answers_and_no_lookup() -> None:
    """The key is the MessageDeduplicationId; reconcile asks nothing and says "unknown"."""
    responses.post(f"{URL}/v1/messages", json={"MessageId": "m-1", "SequenceNumber": "1"})
    responses.post(f"{URL}/v1/messages", status=503)
    responses.post(f"{URL}/v1/messages", body=requests.ConnectionError("reset"))
    responses.post(f"{URL}/v1/messages", status=400, json={"error": "InvalidParameterValue"})
    adapter = QueueFifoAdapter(URL, "s3cret", timeout_s=1)
    assert _send(adapter) == (Answer.ACCEPTED, "m-1")
    sent = responses.calls[0].request
    assert sent.headers["MessageDeduplicationId"] == "key-1"
    assert sent.headers["Authorization"] == "Bearer s3cret"
    assert _send(adapter)[0] is Answer.RETRYABLE
    assert _send(adapter)[0] is Answer.UNKNOWN
    assert _send(adapter)[0] is Answer.PERMANENT
    calls = len(responses.calls)
    verdict = adapter.reconcile(TARGET)
    assert (verdict.found, verdict.error, verdict.conclusive) == (False, None, False)
    assert len(responses.calls) == calls  # nothing to ask: there is no lookup
    adapter.close()


# -- chat ---------------------------------------------------------------------------------


THREAD = f"{URL}/v1/threads/alice@example.com"


@responses.activate
def test_chat_send_and_reconcile_by_the_visible_recognizer() -> None:
    """Stripped metadata: only the visible ``[ref ch-...]`` identifies the message."""
    responses.post(f"{URL}/v1/messages", json={"ok": True, "channel": "c", "ts": "17.000001"})
    responses.get(
        THREAD,
        json={
            "ok": True,
            "messages": [
                {"ts": "16.5", "text": "someone else"},
                {"ts": "17.000001", "text": f"Done.\n\n[ref {REC}]"},
            ],
        },
    )
    adapter = ChatAdapter(URL, "s3cret", timeout_s=1)
    assert _send(adapter) == (Answer.ACCEPTED, "17.000001")
    assert responses.calls[0].request.body is not None
    found = adapter.reconcile(TARGET)
    assert (found.found, found.provider_message_id) == (True, "17.000001")
    adapter.close()


@responses.activate
def test_chat_reconcile_reads_metadata_when_shown_and_says_not_found_or_error() -> None:
    meta = {"event_type": "crash_harness_delivery", "event_payload": {"recognizer": REC}}
    responses.get(
        THREAD, json={"ok": True, "messages": [{"ts": "9", "text": "x", "metadata": meta}]}
    )
    responses.get(THREAD, json={"ok": True, "messages": [{"ts": "9", "text": "ch-ffffffffffff"}]})
    responses.get(THREAD, status=500)
    responses.get(THREAD, body=requests.ConnectionError("down"))
    adapter = ChatAdapter(URL, "s3cret", timeout_s=1)
    assert adapter.reconcile(TARGET).provider_message_id == "9"
    negative = adapter.reconcile(TARGET)
    assert (negative.found, negative.error, negative.conclusive) == (False, None, True)
    assert adapter.reconcile(TARGET).error == "thread answered 500"
    assert adapter.reconcile(TARGET).error == "ConnectionError"
    adapter.close()


# -- smtp (a real aiosmtpd on loopback, through the fake provider) -------------------------


@pytest.fixture(scope="module")
def smtp_provider(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ProviderProcess, str]]:
    secret = secrets.token_urlsafe(16)
    log = Path(tmp_path_factory.mktemp("smtp")) / "effects.sqlite"
    with ProviderProcess.start(
        log_path=log, preset="smtp", credentials={"worker": (secret, ["*"])}
    ) as provider:
        yield provider, secret


def _smtp(provider: ProviderProcess, secret: str) -> SmtpAdapter:
    assert provider.smtp_port is not None
    return SmtpAdapter(
        provider.url, secret, timeout_s=2, smtp_port=provider.smtp_port, username="worker"
    )


def test_smtp_send_is_attributed_and_found_in_the_mailbox(
    smtp_provider: tuple[ProviderProcess, str],
) -> None:
    provider, secret = smtp_provider
    provider.admin.reset()
    adapter = _smtp(provider, secret)
    answer, queue_id = _send(adapter)
    assert answer is Answer.ACCEPTED
    assert queue_id
    (effect,) = provider.admin.effects()
    assert (effect.destination, effect.run_id, effect.delivery_id) == (
        "alice@example.com",
        "run-1",
        "d-1",
    )
    assert (effect.recognizer, effect.provider_message_id) == (REC, queue_id)
    assert effect.idempotency_key == "<key-1@crash-harness.invalid>"
    found = adapter.reconcile(TARGET)
    assert (found.found, found.provider_message_id) == (True, queue_id)
    other = adapter.reconcile(
        ReconcileTarget("k", "alice@example.com", "run-1", "d-2", "ch-ffffffffffff")
    )
    assert (other.found, other.error) == (False, None)
    adapter.close()


def test_smtp_faults_map_to_unknown_and_retryable(
    smtp_provider: tuple[ProviderProcess, str],
) -> None:
    """A cut before the final 250 is unknown (and the mailbox then finds it); 451 retries."""
    provider, secret = smtp_provider
    provider.admin.reset()
    provider.admin.set_faults(
        [
            FaultRule(fault="accept_then_drop", nth=1, times=1),
            FaultRule(fault="status", status=451, nth=2, times=1),
        ]
    )
    adapter = _smtp(provider, secret)
    assert _send(adapter) == (Answer.UNKNOWN, None)
    found = adapter.reconcile(TARGET)
    assert found.found
    assert found.provider_message_id
    assert _send(adapter)[0] is Answer.RETRYABLE
    assert len(provider.admin.effects(outcome="fresh")) == 1
    adapter.close()
    wrong = _smtp(provider, "not-the-secret")
    assert _send(wrong)[0] is Answer.PERMANENT
    wrong.close()
