"""The senders agents use, each on its real provider's documented wire: Slack incoming
webhooks (``chat``), generic JSON webhooks and Microsoft Teams' Workflows with the secret in
the URL (``webhook``), and an open receiver that takes anything, only when asked.

Each refuses a wrong or missing secret the way its provider answers it, and a secret the URL
carries (right or wrong) is never in the effect log, a reason or the browse page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import Effect, ProviderProcess, ProviderStartError, reason_of
from harness.engine.case._provider_reasons import reason_notes

#: what a Slack incoming webhook's URL ends with, and a secret that is nobody's
SLACK_SECRET = "xoxb-hook-secret-0123456789abcdef"
WRONG = "not-the-secret-0123456789abcdef"
HOOK_SECRET = "hook-secret-fedcba9876543210"

#: an Adaptive Card message, as a Teams Workflows webhook takes it
CARD: dict[str, Any] = {
    "type": "message",
    "attachments": [
        {
            "contentType": "application/vnd.microsoft.card.adaptive",
            "content": {
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [{"type": "TextBlock", "text": "Order 42 shipped [ref ch-0123456789ab]"}],
            },
        }
    ],
}
#: a Workflows URL's path and query, without its sig
TEAMS = (
    "/workflows/7c2e1f0a9b8d4c3e/triggers/manual/paths/invoke"
    "?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0"
)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "effects.sqlite"


@pytest.fixture
def slack(log: Path) -> Iterator[ProviderProcess]:
    with ProviderProcess.start(
        log_path=log, preset="chat", credentials={"worker": (SLACK_SECRET, ["B0*"])}
    ) as provider:
        yield provider


def _hook(provider: ProviderProcess, secret: str = SLACK_SECRET, hook: str = "B0123") -> str:
    return f"{provider.url}/services/T0001/{hook}/{secret}"


def _logged_bytes(provider: ProviderProcess, log: Path) -> bytes:
    """Everything the provider wrote: its log, WAL and stderr (stopped first, so complete)."""
    provider.stop()
    return b"".join(p.read_bytes() for p in sorted(log.parent.glob(f"{log.name}*")))


def _browse(provider: ProviderProcess) -> str:
    headers = {"X-Admin-Token": provider.admin_token}
    return requests.get(f"{provider.url}/_browse?epoch=all", headers=headers, timeout=5).text


# -- Slack incoming webhooks ------------------------------------------------------------------
# https://api.slack.com/messaging/webhooks: POST https://hooks.slack.com/services/T.../B.../...
# with a JSON body ({"text": ...}, or blocks / attachments); the answer is "ok" (the Python
# SDK's mock serves it as text/plain; its test asserts body == "ok"). Errors: a string in the
# body with an HTTP status (https://api.slack.com/changelog/
# 2016-05-17-changes-to-errors-for-incoming-webhooks: invalid_payload 400, channel_not_found
# 404, ...; hooks.slack.com answers no_text 400, invalid_token 403, no_service 404).


def test_a_slack_incoming_webhook_takes_text_blocks_or_a_payload_form_and_answers_ok(
    slack: ProviderProcess,
) -> None:
    url = _hook(slack)
    sent = [
        requests.post(url, json={"text": "Order 42 shipped"}, timeout=5),
        requests.post(url, json={"text": "Order 42 shipped"}, timeout=5),
        requests.post(
            url,
            json={"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*42*"}}]},
            timeout=5,
        ),
        requests.post(url, data={"payload": json.dumps({"text": "from a form"})}, timeout=5),
        # an app's webhook posts where it was installed: a channel in the body changes nothing
        requests.post(url, json={"channel": "#general", "text": "moved?"}, timeout=5),
    ]
    assert [(r.status_code, r.text) for r in sent] == [(200, "ok")] * 5
    assert all(r.headers["Content-Type"].startswith("text/plain") for r in sent)
    # no idempotency: the same text twice is two messages, all on the webhook's channel
    effects = slack.admin.assert_effects(5, destination="B0123")
    assert {e.credential_id for e in effects} == {"worker"}
    thread = requests.get(
        f"{slack.url}/v1/threads/B0123?format=text", headers=slack.auth_headers(), timeout=5
    ).text
    assert thread.count("Order 42 shipped") == 2
    assert "from a form" in thread


def test_slack_incoming_webhook_errors_are_its_strings_with_its_statuses(
    slack: ProviderProcess,
) -> None:
    answers = {
        "wrong secret": requests.post(_hook(slack, WRONG), json={"text": "x"}, timeout=5),
        "no secret": requests.post(
            f"{slack.url}/services/T0001/B0123", json={"text": "x"}, timeout=5
        ),
        "not its webhook": requests.post(_hook(slack, hook="C999"), json={"text": "x"}, timeout=5),
        "no text": requests.post(_hook(slack), json={"username": "bot"}, timeout=5),
        "not json": requests.post(
            _hook(slack), data="text=x", headers={"Content-Type": "text/plain"}, timeout=5
        ),
        "a form without payload": requests.post(_hook(slack), data={"text": "x"}, timeout=5),
        "101 attachments": requests.post(
            _hook(slack), json={"attachments": [{"text": "a"}] * 101}, timeout=5
        ),
    }
    assert {k: (r.status_code, r.text) for k, r in answers.items()} == {
        "wrong secret": (403, "invalid_token"),
        "no secret": (403, "invalid_token"),
        "not its webhook": (404, "no_service"),
        "no text": (400, "no_text"),
        "not json": (400, "invalid_payload"),
        "a form without payload": (400, "invalid_payload"),
        "101 attachments": (400, "too_many_attachments"),
    }
    reasons = {k: reason_of(r) or "" for k, r in answers.items()}
    assert "matches no credential" in reasons["wrong secret"]
    assert "no webhook secret in the URL" in reasons["no secret"]
    assert "'C999' is outside B0*" in reasons["not its webhook"]
    assert slack.admin.accepted() == []
    outcomes = sorted(e.outcome for e in slack.admin.reasons())
    assert outcomes == ["refused"] + ["rejected"] * 4 + ["unauthenticated"] * 2
    # what the log says is what the sender was told
    assert sorted(e.reason for e in slack.admin.reasons()) == sorted(reasons.values())


# -- a secret in the URL is never kept ----------------------------------------------------------


def test_no_secret_a_url_carried_is_in_the_log_a_reason_or_the_browse_page(
    log: Path, tmp_path: Path
) -> None:
    """Slack's webhook secret, Discord's token, a generic webhook's path or query secret and
    a Teams sig, right and wrong, sent to every wire: none of them is logged. The rules
    given read the path (its miss is in every record's reason) and the query (the secret's
    own parameter): even they see the URL without its secret."""
    right, other = SLACK_SECRET, HOOK_SECRET
    with ProviderProcess.start(
        log_path=log,
        preset="chat",
        credentials={"worker": (right, ["*"])},
        identify={"run": "path:/runs/{run}"},
    ) as chat:
        for secret in (right, WRONG):
            requests.post(_hook(chat, secret), json={"text": "x"}, timeout=5)
            requests.post(f"{chat.url}/api/webhooks/9/{secret}", json={"content": "x"}, timeout=5)
        assert len(chat.admin.accepted()) == 2
        said = [e.reason or "" for e in chat.admin.effects()] + [_browse(chat)]
        said += [e.destination or "" for e in chat.admin.effects()]
        written = _logged_bytes(chat, log)
    hooks_log = tmp_path / "hooks.sqlite"
    with ProviderProcess.start(
        log_path=hooks_log,
        preset="webhook",
        credentials={"worker": (other, ["*"])},
        options={"secret_path": ["/hooks/{secret}"]},
        identify={"run": "path:/runs/{run}", "delivery": ["query:token", "query:sig"]},
    ) as hooks:
        for secret in (other, WRONG):
            requests.post(f"{hooks.url}/hooks/{secret}", json={"text": "x"}, timeout=5)
            requests.post(f"{hooks.url}/in?token={secret}", json={"text": "x"}, timeout=5)
            requests.post(f"{hooks.url}{TEAMS}&sig={secret}", json=CARD, timeout=5)
        # the right secret where no template says it goes: refused, and still hidden
        requests.post(f"{hooks.url}/elsewhere/{other}", json={"text": "x"}, timeout=5)
        assert len(hooks.admin.accepted()) == 3
        said += [e.reason or "" for e in hooks.admin.effects()] + [_browse(hooks)]
        said += [e.destination or "" for e in hooks.admin.effects()]
        written += _logged_bytes(hooks, hooks_log)
    for secret in (right, other, WRONG):
        assert secret.encode() not in written, secret
        assert not [s for s in said if secret in s], secret


def test_a_payload_hash_is_of_the_url_without_its_secret(log: Path) -> None:
    """One message to one webhook under two secrets hashes alike: the hash holds no secret
    (a short one could be guessed back from it)."""
    with ProviderProcess.start(
        log_path=log,
        preset="chat",
        credentials={"a": (SLACK_SECRET, ["B0*"]), "b": (HOOK_SECRET, ["B0*"])},
    ) as provider:
        for secret in (SLACK_SECRET, HOOK_SECRET):
            assert requests.post(_hook(provider, secret), json={"text": "x"}, timeout=5).ok
        first, second = provider.admin.assert_effects(2, destination="B0123")
    assert first.payload_hash == second.payload_hash
    assert (first.credential_id, second.credential_id) == ("a", "b")


# -- generic JSON webhooks and Teams' Workflows: the secret in the URL --------------------------


@pytest.fixture
def hooks(log: Path) -> Iterator[ProviderProcess]:
    with ProviderProcess.start(
        log_path=log,
        preset="webhook",
        credentials={"worker": (HOOK_SECRET, ["*"])},
        options={"secret_path": ["/hooks/{secret}", "/in/{team}/{secret}"]},
    ) as provider:
        yield provider


def test_a_generic_webhook_takes_its_secret_in_the_query_or_a_path_template(
    hooks: ProviderProcess,
) -> None:
    """No webhook-id is needed from such a sender (without one, each delivery is new); one
    sent is honoured. The endpoint is the path without the secret."""
    posts = [
        requests.post(f"{hooks.url}/hooks/{HOOK_SECRET}", json={"text": "a"}, timeout=5),
        requests.post(f"{hooks.url}/hooks/{HOOK_SECRET}", json={"text": "a"}, timeout=5),
        requests.post(f"{hooks.url}/in/ops/{HOOK_SECRET}", json={"text": "b"}, timeout=5),
        requests.post(f"{hooks.url}/alerts?token={HOOK_SECRET}", json={"text": "c"}, timeout=5),
        requests.post(f"{hooks.url}/alerts?sig={HOOK_SECRET}", json={"text": "c"}, timeout=5),
    ]
    keyed = [
        requests.post(
            f"{hooks.url}/alerts?token={HOOK_SECRET}",
            json={"text": "d"},
            headers={"webhook-id": "msg_1"},
            timeout=5,
        )
        for _ in range(2)
    ]
    assert [r.status_code for r in posts + keyed] == [200] * 7
    assert keyed[1].json()["duplicate"] is True
    effects = hooks.admin.accepted()
    assert sorted(e.destination or "" for e in effects) == ["alerts"] * 3 + ["hooks"] * 2 + [
        "in/ops"
    ]
    hooks.admin.assert_records(1, outcome="deduplicated")


def test_a_wrong_or_missing_url_secret_is_401_saying_where_it_was_looked_for(
    hooks: ProviderProcess,
) -> None:
    wrong_path = requests.post(f"{hooks.url}/hooks/{WRONG}", json={"text": "x"}, timeout=5)
    wrong_query = requests.post(f"{hooks.url}/alerts?token={WRONG}", json={"text": "x"})
    missing = requests.post(f"{hooks.url}/alerts", json={"text": "x"}, timeout=5)
    assert [r.status_code for r in (wrong_path, wrong_query, missing)] == [401] * 3
    assert reason_of(wrong_path) == "the secret in the URL (path) matches no credential"
    assert reason_of(wrong_query) == (
        "the secret in the URL (query parameter token) matches no credential"
    )
    said = reason_of(missing) or ""
    assert "no secret in the URL (query parameter sig or query parameter token" in said
    assert "path /hooks/{secret}" in said
    assert hooks.admin.accepted() == []
    assert len(hooks.admin.reasons(outcome="unauthenticated")) == 3


def test_a_path_secret_needs_a_template_and_a_template_needs_its_secret(log: Path) -> None:
    with ProviderProcess.start(
        log_path=log, preset="webhook", credentials={"worker": (HOOK_SECRET, ["*"])}
    ) as provider:
        # by default the path is the endpoint: no segment of it is taken for a secret
        refused = requests.post(f"{provider.url}/hooks/{HOOK_SECRET}", json={"text": "x"})
        assert refused.status_code == 401
        assert provider.admin.info()["options"]["secret_path"] == []
    with pytest.raises(ProviderStartError, match="one whole \\{secret\\} segment"):
        ProviderProcess.start(
            log_path=log, preset="webhook", options={"secret_path": ["/hooks/{token}"]}
        )


# Teams' Workflows: https://learn.microsoft.com/azure/connectors/connectors-native-reqres (a
# request trigger with no Response action answers 202 Accepted), the trigger URL carries
# api-version, sp, sv and sig; without sig Logic Apps answers 401 DirectApiAuthorizationRequired
# (https://github.com/MicrosoftDocs/azure-docs/issues/60706).


def test_a_teams_workflows_webhook_is_202_every_time_and_refuses_as_logic_apps(
    hooks: ProviderProcess,
) -> None:
    url = f"{hooks.url}{TEAMS}"
    sent = [requests.post(f"{url}&sig={HOOK_SECRET}", json=CARD, timeout=5) for _ in range(2)]
    assert [(r.status_code, r.content) for r in sent] == [(202, b"")] * 2
    # the trigger runs once per request: the same card twice is two messages
    effects = hooks.admin.assert_effects(
        2, destination="workflows/7c2e1f0a9b8d4c3e/triggers/manual/paths/invoke"
    )
    assert {e.idempotency_key for e in effects} == {None}
    no_sig = requests.post(url, json=CARD, timeout=5)
    bad_sig = requests.post(f"{url}&sig={WRONG}", json=CARD, timeout=5)
    not_json = requests.post(
        f"{url}&sig={HOOK_SECRET}", data="<card/>", headers={"Content-Type": "text/xml"}
    )
    assert [r.status_code for r in (no_sig, bad_sig, not_json)] == [401, 401, 400]
    assert [r.json()["error"]["code"] for r in (no_sig, bad_sig, not_json)] == [
        "DirectApiAuthorizationRequired",
        "DirectApiInvalidAuthorizationSignature",
        "TriggerInputSchemaMismatch",
    ]
    assert "no sig query parameter" in (reason_of(no_sig) or "")
    assert "matches no credential" in (reason_of(bad_sig) or "")
    assert len(hooks.admin.accepted()) == 2


# -- the open receiver ---------------------------------------------------------------------------


def test_an_open_receiver_refuses_nothing_and_says_it_was_open(log: Path) -> None:
    with ProviderProcess.start(
        log_path=log,
        preset="webhook",
        credentials={"worker": (HOOK_SECRET, ["only-*"])},
        options={"open": True},
    ) as provider:
        info = provider.admin.info()
        assert info["options"]["open"] is True
        assert info["auth"] == ["open"]
        sent = [
            requests.post(f"{provider.url}/internal", json={"text": "no credential"}),
            requests.post(
                f"{provider.url}/internal",
                json={"text": "a wrong one"},
                headers={"Authorization": f"Bearer {WRONG}"},
            ),
            requests.post(f"{provider.url}/internal?token={WRONG}", json={"text": "wrong"}),
            requests.post(f"{provider.url}{TEAMS}", json=CARD),  # no sig
            requests.post(
                f"{provider.url}/v1/messages",  # outside the credential's scope
                json={"destination": "elsewhere", "run_id": "r1", "body": "x"},
                headers=provider.auth_headers(),
            ),
        ]
        assert [r.status_code for r in sent] == [200, 200, 200, 202, 200]
        effects = provider.admin.assert_effects(5)
        assert {e.credential_id for e in effects} == {"(open)"}
        # its record too is for anyone to read
        listed = requests.get(f"{provider.url}/v1/deliveries", timeout=5)
        assert len(listed.json()["deliveries"]) == 5
        assert provider.admin.reasons(outcome="unauthenticated") == []
        assert provider.admin.reasons(outcome="refused") == []
        notes = reason_notes(provider.admin.effects())
        assert notes[0] == (
            "provider: 5 request(s) accepted with no credential checked: the receiver is open"
            " (open = true)"
        )
        written = _logged_bytes(provider, log)
    assert WRONG.encode() not in written


def test_a_receiver_is_not_open_unless_asked(log: Path) -> None:
    with ProviderProcess.start(
        log_path=log, preset="webhook", credentials={"worker": (HOOK_SECRET, ["*"])}
    ) as provider:
        info = provider.admin.info()
        assert info["options"]["open"] is False
        assert "open" not in info["auth"]
        refused = requests.post(f"{provider.url}/internal", json={"text": "x"}, timeout=5)
        assert refused.status_code == 401
        assert provider.admin.accepted() == []
        assert not [n for n in reason_notes(provider.admin.effects()) if "open" in n]


def test_only_accepted_open_requests_make_the_open_note() -> None:
    """The note counts what the receiver took without a credential, nothing else."""

    def effect(seq: int, outcome: str, credential: str | None) -> Effect:
        return Effect(
            seq=seq,
            epoch=1,
            received_at=0.0,
            credential_id=credential,
            destination="d",
            run_id="r",
            delivery_id=None,
            idempotency_key=None,
            payload_hash=None,
            recognizer=None,
            outcome=outcome,
            provider_message_id=None,
            fault=None,
            status_code=200,
        )

    notes = reason_notes(
        [effect(1, "fresh", "(open)"), effect(2, "fresh", "worker"), effect(3, "fresh", None)]
    )
    assert notes == [
        "provider: 1 request(s) accepted with no credential checked: the receiver is open"
        " (open = true)"
    ]
