"""Each preset takes its real provider's documented request shapes (issue 24).

A worker under test should send what it ships: a Standard Webhooks POST, a Stripe form, a
Slack ``chat.postMessage``, a Discord webhook, an SQS ``SendMessage``, a PayPal order, a
plain e-mail. Each test sends the shape the provider's own documentation shows (cited
above each test) and checks that the fake counts it, deduplicates it and refuses it by
that provider's rules, and that every refusal says why.
"""

from __future__ import annotations

import base64
import json
import smtplib
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import ProviderProcess, reason_of
from fake_providers.presets.webhook import sign

#: a Standard Webhooks secret: "whsec_" + base64 of the key bytes
WHSEC = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "effects.sqlite"


def _started(log: Path, preset: str, **kwargs: Any) -> Iterator[ProviderProcess]:
    with ProviderProcess.start(log_path=log, preset=preset, **kwargs) as provider:
        yield provider


# -- webhook: Standard Webhooks -------------------------------------------------------------
# https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md:
# headers webhook-id, webhook-timestamp (Unix seconds), webhook-signature
# ("v1,<base64 HMAC-SHA256 of '{id}.{timestamp}.{body}'>", secret "whsec_<base64>"); the
# payload is JSON ({"type": ..., "timestamp": ..., "data": {...}}); webhook-id is the
# idempotency key; the receiver's URL is the endpoint.


def _standard_webhook(
    url: str, msg_id: str, payload: dict[str, Any], *, ts: int | None = None, key: str = WHSEC
) -> requests.Response:
    stamp = int(time.time()) if ts is None else ts
    raw = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(key, msg_id, stamp, raw),
    }
    return requests.post(url, data=raw, headers=headers, timeout=5)


EVENT = {
    "type": "order.confirmed",
    "timestamp": "2026-12-04T08:00:00Z",
    "data": {"order_id": 42, "email": "alice@example.com"},
}


@pytest.fixture
def webhook(log: Path) -> Iterator[ProviderProcess]:
    yield from _started(
        log,
        "webhook",
        credentials={"worker": (WHSEC, ["*"])},
        identify={"delivery": "json:/data/order_id"},
    )


def test_a_standard_webhook_is_counted_at_its_url_path_and_deduplicated_by_webhook_id(
    webhook: ProviderProcess,
) -> None:
    url = f"{webhook.url}/hooks/orders"
    first = _standard_webhook(url, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", EVENT)
    again = _standard_webhook(url, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", EVENT)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json()["duplicate"] is True
    [effect] = webhook.admin.assert_effects(1)
    # The path is the endpoint; the user's own id comes from the rule; no harness field sent.
    assert (effect.destination, effect.delivery_id, effect.run_id) == ("hooks/orders", "42", None)
    assert effect.idempotency_key == "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
    assert effect.reason is None  # attributed by its own id
    webhook.admin.assert_records(1, outcome="deduplicated")


def test_a_webhook_with_a_bad_signature_or_stale_timestamp_is_401_saying_which(
    webhook: ProviderProcess,
) -> None:
    url = f"{webhook.url}/hooks/orders"
    forged = _standard_webhook(url, "msg_1", EVENT, key="whsec_" + base64.b64encode(b"x").decode())
    stale = _standard_webhook(url, "msg_2", EVENT, ts=int(time.time()) - 3600)
    assert (forged.status_code, stale.status_code) == (401, 401)
    assert "webhook-signature matches no credential" in (reason_of(forged) or "")
    assert "tolerance_s is 300" in (reason_of(stale) or "")
    reasons = [e.reason for e in webhook.admin.reasons(outcome="unauthenticated")]
    assert reasons == [reason_of(forged), reason_of(stale)]
    assert webhook.admin.accepted() == []


def test_a_webhook_whose_rule_finds_no_run_is_delivered_and_marked_unattributed(
    log: Path,
) -> None:
    with ProviderProcess.start(
        log_path=log, preset="webhook", credentials={"worker": (WHSEC, ["*"])}
    ) as provider:
        response = _standard_webhook(f"{provider.url}/hooks/orders", "msg_9", EVENT)
        assert response.status_code == 200
        [effect] = provider.admin.unattributed()
    assert effect.reason is not None
    assert effect.reason.startswith("unattributed: run rule found no value")
    assert "json:/run_id: the body has no key 'run_id' (has: data, timestamp, type)" in (
        effect.reason
    )


# -- payments: Stripe -----------------------------------------------------------------------
# https://docs.stripe.com/api/idempotent_requests: `curl https://api.stripe.com/v1/customers
# -H "Idempotency-Key: KG5LxwFBepaKHyUD" -d description=...` (form-encoded parameters);
# the first result is saved and replayed for the same key; "the idempotency layer compares
# incoming parameters to those of the original request and errors if they're not the same"
# (error type idempotency_error: "an Idempotency-Key is re-used on a request that does not
# match the first request's API endpoint and parameters").


@pytest.fixture
def stripe(log: Path) -> Iterator[ProviderProcess]:
    yield from _started(log, "payments")


def _stripe_post(
    provider: ProviderProcess, path: str, key: str, data: dict[str, str]
) -> requests.Response:
    headers = {**provider.auth_headers(), "Idempotency-Key": key}
    return requests.post(f"{provider.url}{path}", data=data, headers=headers, timeout=5)


CHARGE = {
    "amount": "2000",
    "currency": "usd",
    "customer": "cus_NffrFeUfNV2Hib",
    "metadata[run_id]": "run-7",
    "metadata[order_id]": "42",
}


def test_a_stripe_form_request_is_counted_and_replayed_for_the_same_key(
    stripe: ProviderProcess,
) -> None:
    first = _stripe_post(stripe, "/v1/payment_intents", "KG5LxwFBepaKHyUD", CHARGE)
    again = _stripe_post(stripe, "/v1/payment_intents", "KG5LxwFBepaKHyUD", CHARGE)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert first.json()["object"] == "payment_intent"
    [effect] = stripe.admin.assert_effects(1)
    assert (effect.destination, effect.run_id) == ("cus_NffrFeUfNV2Hib", "run-7")
    stripe.admin.assert_records(1, outcome="deduplicated")


def test_a_stripe_key_reused_with_other_parameters_is_an_idempotency_error_naming_them(
    stripe: ProviderProcess,
) -> None:
    _stripe_post(stripe, "/v1/payment_intents", "k-1", CHARGE)
    changed = _stripe_post(stripe, "/v1/payment_intents", "k-1", {**CHARGE, "amount": "2500"})
    other_endpoint = _stripe_post(stripe, "/v1/refunds", "k-1", CHARGE)
    # Stripe answers 400 (stripe/stripe-ruby#503 quotes the reply) with idempotency_error.
    assert changed.status_code == other_endpoint.status_code == 400
    error = changed.json()["error"]
    assert error["type"] == "idempotency_error"
    assert error["message"].startswith(
        "Keys for idempotent requests can only be used with the same parameters"
    )
    assert "differs in: amount (first '2000', now '2500')" in (reason_of(changed) or "")
    assert "the endpoint or the body's encoding differs" in (reason_of(other_endpoint) or "")
    stripe.admin.assert_effects(1)
    [rejected, _] = stripe.admin.reasons(outcome="rejected")
    assert rejected.reason == reason_of(changed)


def test_a_stripe_json_body_is_taken_too(stripe: ProviderProcess) -> None:
    headers = {**stripe.auth_headers(), "Idempotency-Key": "j-1"}
    body = {"amount": 2000, "currency": "usd", "customer": "cus_1", "metadata": {"run_id": "r"}}
    response = requests.post(f"{stripe.url}/v1/charges", json=body, headers=headers, timeout=5)
    assert response.status_code == 200
    [effect] = stripe.admin.assert_effects(1)
    assert (effect.destination, effect.run_id) == ("cus_1", "r")


# -- chat: Slack chat.postMessage and Discord webhooks ---------------------------------------
# https://api.slack.com/methods/chat.postMessage: POST https://slack.com/api/chat.postMessage,
# application/x-www-form-urlencoded or application/json, `channel` and `text`, the token
# as an Authorization header or a `token` POST parameter; answers {"ok": true, "channel",
# "ts", "message"} or {"ok": false, "error": ...} with HTTP 200.
# https://discord.com/developers/docs/resources/webhook#execute-webhook:
# POST /webhooks/{webhook.id}/{webhook.token} with `content`; `wait=true` "waits for server
# confirmation of message send before response, and returns the created message body".


@pytest.fixture
def chat(log: Path) -> Iterator[ProviderProcess]:
    yield from _started(
        log, "chat", credentials={"worker": ("xoxb-test-token-0123456789", ["C*", "9*"])}
    )


def test_slack_post_message_json_and_form_each_make_a_message(chat: ProviderProcess) -> None:
    url = f"{chat.url}/api/chat.postMessage"
    as_json = requests.post(
        url,
        json={"channel": "C1234567890", "text": "Order 42 shipped"},
        headers=chat.auth_headers(),
        timeout=5,
    )
    as_form = requests.post(
        url,
        data={"token": chat.secret(), "channel": "C1234567890", "text": "Order 42 shipped"},
        timeout=5,
    )
    assert as_json.status_code == as_form.status_code == 200
    assert as_json.json()["ok"] is True
    assert as_form.json()["ok"] is True
    assert as_json.json()["ts"] != as_form.json()["ts"]
    # No idempotency: the same message twice is two messages in the channel.
    effects = chat.admin.assert_effects(2, destination="C1234567890")
    assert all((e.reason or "").startswith("unattributed: run rule") for e in effects)


def test_a_slack_token_sent_as_a_form_field_is_never_kept_in_the_log(
    chat: ProviderProcess, log: Path
) -> None:
    """The docs promise a secret is never logged nor shown: Slack's ``token`` field (and a
    Discord webhook token in the URL) is a secret the request itself carries."""
    sent = requests.post(
        f"{chat.url}/api/chat.postMessage",
        data={"token": chat.secret(), "channel": "C1", "text": "hi"},
        timeout=5,
    )
    assert sent.json()["ok"] is True
    requests.post(f"{chat.url}/api/webhooks/9/{chat.secret()}", json={"content": "hi"}, timeout=5)
    page = requests.get(
        f"{chat.url}/_browse", headers={"X-Admin-Token": chat.admin_token}, timeout=5
    ).text
    assert "token=%3Credacted%3E" in page or "token=&lt;redacted&gt;" in page
    chat.stop()
    for path in (log, Path(f"{log}-wal")):
        if path.exists():
            assert chat.secret().encode() not in path.read_bytes()
    assert chat.secret() not in page


def test_slack_errors_are_http_200_ok_false_with_the_reason(chat: ProviderProcess) -> None:
    url = f"{chat.url}/api/chat.postMessage"
    no_channel = requests.post(url, json={"text": "x"}, headers=chat.auth_headers(), timeout=5)
    no_text = requests.post(url, json={"channel": "C1"}, headers=chat.auth_headers(), timeout=5)
    bad_auth = requests.post(
        url, json={"channel": "C1", "text": "x"}, headers={"Authorization": "Bearer no"}, timeout=5
    )
    no_auth = requests.post(url, json={"channel": "C1", "text": "x"}, timeout=5)
    outside = requests.post(
        url, json={"channel": "D1", "text": "x"}, headers=chat.auth_headers(), timeout=5
    )
    answers = [no_channel, no_text, bad_auth, no_auth, outside]
    assert [r.status_code for r in answers] == [200] * 5
    assert [r.json()["error"] for r in answers] == [
        "channel_not_found",
        "no_text",
        "invalid_auth",
        "not_authed",
        "channel_not_found",
    ]
    assert all(r.json()["ok"] is False and reason_of(r) for r in answers)
    assert chat.admin.accepted() == []
    assert len(chat.admin.reasons()) == 5


def test_a_discord_webhook_posts_content_and_wait_returns_the_message(
    chat: ProviderProcess,
) -> None:
    url = f"{chat.url}/api/webhooks/912345678901234567/{chat.secret()}"
    quiet = requests.post(url, json={"content": "Order 42 shipped"}, timeout=5)
    waited = requests.post(f"{url}?wait=true", json={"content": "Order 43 shipped"}, timeout=5)
    assert (quiet.status_code, quiet.content) == (204, b"")
    assert waited.status_code == 200
    assert waited.json()["content"] == "Order 43 shipped"
    assert waited.json()["webhook_id"] == "912345678901234567"
    chat.admin.assert_effects(2, destination="912345678901234567")
    bad = requests.post(
        f"{chat.url}/api/webhooks/912345678901234567/wrong", json={"content": "x"}, timeout=5
    )
    empty = requests.post(url, json={"content": ""}, timeout=5)
    assert (bad.status_code, bad.json()["code"]) == (401, 50027)
    assert (empty.status_code, empty.json()["code"]) == (400, 50006)


# -- smtp: any RFC 5322 message ---------------------------------------------------------------
# RFC 5321: the recipients are the envelope's RCPT TO, whatever the To: header says;
# RFC 5322: a message needs no header beyond From and Date (smtplib adds none of ours).


def test_a_plain_email_is_counted_per_envelope_recipient_with_no_harness_headers(
    log: Path,
) -> None:
    with ProviderProcess.start(
        log_path=log, preset="smtp", identify={"delivery": r"regex:Order #(\d+)"}
    ) as provider:
        msg = EmailMessage()
        msg["From"] = "shop@sender.test"
        msg["To"] = "Customers <undisclosed-recipients:;>"
        msg["Subject"] = "Order #42 confirmed"
        msg.set_content("Thank you for your order.")
        assert provider.smtp_port is not None
        with smtplib.SMTP("127.0.0.1", provider.smtp_port, timeout=5) as client:
            client.login("worker", provider.secret())
            client.send_message(msg, to_addrs=["alice@example.com", "bob@example.com"])
            client.send_message(msg, to_addrs=["alice@example.com"])
        effects = provider.admin.accepted()
    assert sorted(e.destination or "" for e in effects) == [
        "alice@example.com",
        "alice@example.com",
        "bob@example.com",
    ]
    assert {(e.delivery_id, e.reason) for e in effects} == {("42", None)}


# -- queue-fifo: SQS SendMessage ----------------------------------------------------------------
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html:
# JSON protocol, X-Amz-Target: AmazonSQS.SendMessage, {"QueueUrl", "MessageBody",
# "MessageDeduplicationId", "MessageGroupId"}; a repeated deduplication id within 5 minutes
# is accepted and not delivered again.


def test_an_sqs_send_message_is_deduplicated_on_its_queue(log: Path) -> None:
    with ProviderProcess.start(log_path=log, preset="queue-fifo") as provider:
        body = {
            "QueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
            "MessageBody": '{"order_id": 42}',
            "MessageGroupId": "orders",
            "MessageDeduplicationId": "order-42",
        }
        headers = {
            **provider.auth_headers(),
            "X-Amz-Target": "AmazonSQS.SendMessage",
            "Content-Type": "application/x-amz-json-1.0",
        }
        sends = [
            requests.post(f"{provider.url}/", data=json.dumps(body), headers=headers, timeout=5)
            for _ in range(2)
        ]
        assert [s.status_code for s in sends] == [200, 200]
        assert sends[0].json()["MessageId"] == sends[1].json()["MessageId"]
        [effect] = provider.admin.assert_effects(1, destination="orders.fifo")
        assert effect.idempotency_key == "order-42"
        provider.admin.assert_records(1, outcome="deduplicated")


# -- orders: PayPal Orders v2 -------------------------------------------------------------------
# https://developer.paypal.com/docs/api/orders/v2/#orders_create and
# https://developer.paypal.com/api/rest/reference/idempotency/: POST /v2/checkout/orders with
# PayPal-Request-Id; a repeat returns the original order.


def test_a_paypal_create_order_is_counted_once_per_request_id(log: Path) -> None:
    with ProviderProcess.start(log_path=log, preset="orders") as provider:
        order = {
            "intent": "CAPTURE",
            "purchase_units": [
                {
                    "reference_id": "order-42",
                    "amount": {"currency_code": "USD", "value": "20.00"},
                    "payee": {"merchant_id": "MERCHANT7"},
                }
            ],
        }
        headers = {**provider.auth_headers(), "PayPal-Request-Id": "7b92603e-77ed-4896"}
        url = f"{provider.url}/v2/checkout/orders"
        first = requests.post(url, json=order, headers=headers, timeout=5)
        again = requests.post(url, json=order, headers=headers, timeout=5)
        assert (first.status_code, again.status_code) == (201, 200)
        assert first.json()["id"] == again.json()["id"]
        [effect] = provider.admin.assert_effects(1)
        assert (effect.destination, effect.delivery_id) == ("MERCHANT7", "order-42")


# -- the harness's own shape is one rule among others ----------------------------------------


def test_the_harness_message_shape_is_still_counted_by_the_default_rules(log: Path) -> None:
    with ProviderProcess.start(log_path=log, preset="webhook") as provider:
        headers = {**provider.auth_headers(), "webhook-id": "w1", "X-Run-Id": "ignored"}
        body = {"destination": "endpoint-1", "run_id": "run-1", "delivery_id": "d-1", "body": "x"}
        response = requests.post(
            f"{provider.url}/v1/messages", json=body, headers=headers, timeout=5
        )
        assert response.status_code == 200
        [effect] = provider.admin.accepted()
    assert (effect.destination, effect.run_id, effect.delivery_id, effect.reason) == (
        "endpoint-1",
        "run-1",
        "d-1",
        None,
    )
