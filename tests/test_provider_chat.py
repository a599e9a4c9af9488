"""The chat preset: no idempotency, a rendered thread, hidden metadata stripped or not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from fake_providers import FaultRule, ProviderProcess

REC = "ch-0123456789ab"
HIDDEN = "ch-fedcba987654"


def message(**overrides: Any) -> dict[str, Any]:
    """A valid chat post, with any field overridden."""
    body = {
        "destination": "room-1",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": f"Report ready [ref {REC}]",
    }
    body.update(overrides)
    return body


def post(
    provider: ProviderProcess, body: dict[str, Any] | None = None, key: str | None = None
) -> requests.Response:
    """POST one chat message (optionally with an Idempotency-Key the preset ignores)."""
    headers = provider.auth_headers()
    if key is not None:
        headers["Idempotency-Key"] = key
    payload = message() if body is None else body
    return requests.post(f"{provider.url}/v1/messages", json=payload, headers=headers, timeout=5)


def thread(
    provider: ProviderProcess, channel: str = "room-1", credential: str = "worker"
) -> requests.Response:
    """GET the rendered thread of ``channel``."""
    return requests.get(
        f"{provider.url}/v1/threads/{channel}",
        headers=provider.auth_headers(credential),
        timeout=5,
    )


def start(log: Any, **options: Any) -> ProviderProcess:
    """A chat provider with a second tenant scoped to room-2 only."""
    credentials = {"worker": ("w-" + "a" * 30, ["*"]), "other": ("o-" + "b" * 30, ["room-2"])}
    return ProviderProcess.start(
        log_path=log, preset="chat", credentials=credentials, options=options
    )


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """A chat provider that shows metadata."""
    with start(tmp_path_factory.mktemp("chat") / "effects.sqlite") as provider:
        yield provider


@pytest.fixture
def provider(plain: ProviderProcess) -> ProviderProcess:
    """The plain chat provider in a fresh epoch."""
    plain.admin.reset()
    return plain


def test_two_posts_are_two_messages(provider: ProviderProcess) -> None:
    """The same post twice (same key even) is two messages, both in the thread."""
    first = post(provider, key="k1")
    second = post(provider, key="k1")
    assert first.status_code == second.status_code == 200
    assert first.json()["ts"] != second.json()["ts"]
    messages = thread(provider).json()["messages"]
    assert [m["ts"] for m in messages] == [first.json()["ts"], second.json()["ts"]]
    assert all(REC in m["text"] for m in messages)
    records = provider.admin.assert_effects(2, outcome="fresh", recognizer=REC)
    assert {r.idempotency_key for r in records} == {"k1"}


def test_hidden_metadata_is_shown_when_not_stripped(provider: ProviderProcess) -> None:
    """Without strip_metadata the thread keeps the HTML comment and the metadata field."""
    post(provider, message(body=f"Done. <!-- {HIDDEN} -->", recognizer=HIDDEN))
    [shown] = thread(provider).json()["messages"]
    assert shown["text"] == f"Done. <!-- {HIDDEN} -->"
    assert shown["metadata"]["event_payload"]["recognizer"] == HIDDEN


def test_strip_metadata_leaves_only_visible_text(tmp_path: Any) -> None:
    """Stripped: a hidden recognizer leaves the thread, a visible one stays, the log has both."""
    with start(tmp_path / "strip.sqlite", strip_metadata=True) as provider:
        post(provider, message(body=f"Done. <!-- {HIDDEN} -->", recognizer=HIDDEN))
        post(provider, message(delivery_id="d-2"))
        response = thread(provider)
        [hidden, visible] = response.json()["messages"]
        assert hidden == {"ts": hidden["ts"], "text": "Done."}
        assert HIDDEN not in json.dumps(response.json())
        assert REC in visible["text"]
        text = requests.get(
            f"{provider.url}/v1/threads/room-1",
            params={"format": "text"},
            headers=provider.auth_headers(),
            timeout=5,
        ).text
        assert text == f"Done.\n\nReport ready [ref {REC}]"
        assert [e.recognizer for e in provider.admin.accepted()] == [HIDDEN, REC]


def test_recognizer_is_found_in_the_text_without_a_field(provider: ProviderProcess) -> None:
    """No recognizer field: the log takes the ch-<hex> from the body text."""
    post(provider)
    [effect] = provider.admin.accepted()
    assert effect.recognizer == REC


def test_thread_needs_a_credential_in_scope(provider: ProviderProcess) -> None:
    """No credential is 401; a tenant outside the channel's scope gets 403."""
    post(provider)
    bare = requests.get(f"{provider.url}/v1/threads/room-1", timeout=5)
    assert bare.status_code == 401
    assert thread(provider, credential="other").status_code == 403
    assert thread(provider, channel="room-2", credential="other").json()["messages"] == []


def test_retry_after_a_dropped_reply_posts_twice(provider: ProviderProcess) -> None:
    """No idempotency: a blind retry after accept_then_drop is a visible duplicate."""
    provider.admin.set_faults([FaultRule(fault="accept_then_drop")])
    with pytest.raises(requests.ConnectionError):
        post(provider)
    assert post(provider).status_code == 200
    assert len(thread(provider).json()["messages"]) == 2
    provider.admin.assert_effects(2, outcome="fresh", run_id="run-1", destination="room-1")
