"""The smtp preset: a real SMTP server with AUTH, scopes, faults, and a mailbox over HTTP."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderProcess

REC = "ch-0123456789ab"


def mail(
    *, to: str | list[str] = "alice@example.com", message_id: str = "<m1@test>"
) -> EmailMessage:
    """A notification mail carrying run, delivery and a visible recognizer."""
    msg = EmailMessage()
    msg["From"] = "worker@sender.test"
    msg["To"] = to if isinstance(to, str) else ", ".join(to)
    msg["Subject"] = "Your report"
    msg["Message-ID"] = message_id
    msg["X-Run-Id"] = "run-1"
    msg["X-Delivery-Id"] = "d-1"
    msg.set_content(f"The report is ready.\n[ref {REC}]\n")
    return msg


def connect(provider: ProviderProcess, *, timeout: float = 5.0) -> smtplib.SMTP:
    """An SMTP client connected to the provider's SMTP port."""
    assert provider.smtp_port is not None
    return smtplib.SMTP("127.0.0.1", provider.smtp_port, timeout=timeout)


def send(provider: ProviderProcess, msg: EmailMessage, *, timeout: float = 5.0) -> None:
    """Log in as the worker credential and send ``msg``."""
    with connect(provider, timeout=timeout) as client:
        client.login("worker", provider.secret())
        client.send_message(msg)


def mailbox(provider: ProviderProcess, **params: str) -> list[dict[str, Any]]:
    """Search the mailbox over HTTP as the worker."""
    response = requests.get(
        f"{provider.url}/v1/mailbox", params=params, headers=provider.auth_headers(), timeout=5
    )
    assert response.status_code == 200
    found: list[dict[str, Any]] = response.json()["messages"]
    return found


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """One SMTP provider whose worker may mail *@example.com only."""
    log = tmp_path_factory.mktemp("smtp") / "effects.sqlite"
    credentials = {"worker": ("w-" + "a" * 30, ["*@example.com"])}
    with ProviderProcess.start(log_path=log, preset="smtp", credentials=credentials) as provider:
        yield provider


@pytest.fixture
def provider(shared: ProviderProcess) -> ProviderProcess:
    """The shared SMTP provider in a fresh epoch."""
    shared.admin.reset()
    return shared


def test_authenticated_mail_shows_in_mailbox_once_per_recipient(provider: ProviderProcess) -> None:
    """AUTH then send to two recipients: two effects, both found by a mailbox search."""
    send(provider, mail(to=["alice@example.com", "bob@example.com"]))
    records = provider.admin.assert_effects(2, outcome="fresh")
    assert {r.destination for r in records} == {"alice@example.com", "bob@example.com"}
    for record in records:
        assert (record.run_id, record.delivery_id, record.recognizer) == ("run-1", "d-1", REC)
        assert (record.idempotency_key, record.status_code) == ("<m1@test>", 250)
        assert record.credential_id == "worker"
    found = mailbox(provider, to="bob@example.com", q="REPORT IS READY")
    assert [m["to"] for m in found] == ["bob@example.com"]
    assert found[0]["subject"] == "Your report"
    assert REC in found[0]["text"]
    assert mailbox(provider, q="no such words") == []


def test_resend_with_same_message_id_is_a_second_mail(provider: ProviderProcess) -> None:
    """SMTP has no dedupe: the same Message-ID twice is two mails."""
    send(provider, mail())
    send(provider, mail())
    assert len(mailbox(provider, to="alice@example.com")) == 2
    provider.admin.assert_effects(2, outcome="fresh", idempotency_key="<m1@test>")


def test_wrong_password_is_535_and_no_auth_is_530(provider: ProviderProcess) -> None:
    """Bad credentials get 535 (logged unauthenticated); MAIL without AUTH gets 530."""
    with connect(provider) as client, pytest.raises(smtplib.SMTPAuthenticationError) as bad:
        client.login("worker", "not-the-password")
    assert bad.value.smtp_code == 535
    with connect(provider) as client:
        client.ehlo()
        code, _ = client.mail("worker@sender.test")
    assert code == 530
    assert provider.admin.count(outcome="unauthenticated") >= 1
    assert provider.admin.accepted() == []


def test_recipient_outside_scope_is_550_and_refused(provider: ProviderProcess) -> None:
    """RCPT TO outside the credential's globs is refused and logged; nothing is delivered."""
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        send(provider, mail(to="mallory@evil.test"))
    assert refused.value.recipients["mallory@evil.test"][0] == 550
    [record] = provider.admin.assert_records(1, outcome="refused")
    assert record.destination == "mallory@evil.test"
    assert provider.admin.accepted() == []


def test_mailbox_needs_a_credential(provider: ProviderProcess) -> None:
    """The mailbox API answers 401 without a bearer credential."""
    response = requests.get(f"{provider.url}/v1/mailbox", timeout=5)
    assert response.status_code == 401


def test_accept_then_drop_cuts_before_the_final_250(provider: ProviderProcess) -> None:
    """The client loses the connection after DATA; the mail is in the log and mailbox."""
    provider.admin.set_faults([FaultRule(fault="accept_then_drop")])
    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(provider, mail())
    [record] = provider.admin.accepted()
    assert (record.fault, record.destination) == ("accept_then_drop", "alice@example.com")
    assert len(mailbox(provider)) == 1


def test_status_fault_answers_data_and_delivers_nothing(provider: ProviderProcess) -> None:
    """A 451 fault is the DATA reply; the log says failed_by_fault and nothing was accepted."""
    provider.admin.set_faults([FaultRule(fault="status", status=451)])
    with pytest.raises(smtplib.SMTPDataError) as failed:
        send(provider, mail())
    assert failed.value.smtp_code == 451
    [record] = provider.admin.assert_records(1, outcome="failed_by_fault")
    assert (record.status_code, record.fault) == (451, "status")
    assert provider.admin.accepted() == []
    send(provider, mail())
    assert len(mailbox(provider)) == 1


def test_timeout_fault_holds_the_final_reply(provider: ProviderProcess) -> None:
    """The mail is logged, but the 250 comes later than the client waits."""
    provider.admin.set_faults([FaultRule(fault="timeout", hold_s=2.0, then="drop")])
    with pytest.raises((TimeoutError, smtplib.SMTPServerDisconnected)):
        send(provider, mail(), timeout=0.5)
    [record] = provider.admin.accepted()
    assert record.fault == "timeout"


def test_restart_keeps_the_smtp_port_and_the_mail(tmp_path: Path) -> None:
    """After SIGKILL and restart the SMTP port is the same and the mailbox still has the mail."""
    with ProviderProcess.start(log_path=tmp_path / "e.sqlite", preset="smtp") as provider:
        send(provider, mail())
        port = provider.smtp_port
        provider.kill()
        provider.restart()
        assert provider.smtp_port == port
        assert len(mailbox(provider)) == 1
        send(provider, mail())
        assert provider.admin.count(outcome="fresh") == 2
