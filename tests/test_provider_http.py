"""The payments preset's worker-facing and admin HTTP contract, against a real subprocess."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import Effect, ProviderProcess, body_hash

WINDOW_S = 86_400.0


def message(**overrides: Any) -> dict[str, Any]:
    """A valid POST /v1/messages body, with any field overridden."""
    body = {
        "destination": "acct_1",
        "run_id": "run-1",
        "delivery_id": "d-1",
        "body": "hello",
        "recognizer": "rec-1",
    }
    body.update(overrides)
    return body


def send(
    session: requests.Session,
    provider: ProviderProcess,
    key: str | None,
    body: dict[str, Any] | None = None,
    credential: str = "worker",
) -> requests.Response:
    """POST one message as ``credential`` with Idempotency-Key ``key`` (None: no header)."""
    headers = provider.auth_headers(credential)
    if key is not None:
        headers["Idempotency-Key"] = key
    payload = message() if body is None else body
    return session.post(f"{provider.url}/v1/messages", json=payload, headers=headers, timeout=5)


def lookup(
    session: requests.Session, provider: ProviderProcess, key: str, credential: str = "worker"
) -> requests.Response:
    """GET /v1/messages?idempotency_key=key as ``credential``."""
    return session.get(
        f"{provider.url}/v1/messages",
        params={"idempotency_key": key},
        headers=provider.auth_headers(credential),
        timeout=5,
    )


@pytest.fixture(scope="module")
def shared_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """One provider for the module; tests isolate themselves with a fresh epoch."""
    log = tmp_path_factory.mktemp("provider") / "effects.sqlite"
    credentials = {
        "worker": ("worker-secret-" + "a" * 20, ["acct_*"]),
        "other": ("other-secret-" + "b" * 20, ["*"]),
    }
    with ProviderProcess.start(log_path=log, credentials=credentials) as provider:
        yield provider


@pytest.fixture
def provider(shared_provider: ProviderProcess) -> ProviderProcess:
    """The shared provider, reset to a new epoch with no faults."""
    shared_provider.admin.reset()
    return shared_provider


@pytest.fixture
def session() -> Iterator[requests.Session]:
    """A worker-side HTTP session, closed afterwards."""
    with requests.Session() as s:
        yield s


def test_missing_or_unknown_credential_is_401_and_logged(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """No bearer token or an unknown one gets 401 and an `unauthenticated` record."""
    url = f"{provider.url}/v1/messages"
    bare = session.post(url, json=message(), headers={"Idempotency-Key": "k"}, timeout=5)
    wrong = session.post(
        url,
        json=message(),
        headers={"Idempotency-Key": "k", "Authorization": "Bearer not-a-secret"},
        timeout=5,
    )
    assert (bare.status_code, bare.json()["error"]) == (401, "unauthenticated")
    assert (wrong.status_code, wrong.json()["error"]) == (401, "unauthenticated")
    # The reason says what was wrong, never echoing the token.
    assert "no Authorization header" in bare.json()["reason"]
    assert "matches no credential" in wrong.json()["reason"]
    assert "not-a-secret" not in wrong.text
    records = provider.admin.assert_records(2, outcome="unauthenticated")
    assert all(r.credential_id is None and r.status_code == 401 for r in records)
    assert provider.admin.accepted() == []


def test_secrets_never_reach_log_stderr_or_argv(tmp_path: Path) -> None:
    """Neither worker secrets, a wrong secret, nor the admin token are on disk or in argv."""
    log = tmp_path / "effects.sqlite"
    with ProviderProcess.start(log_path=log) as provider, requests.Session() as s:
        secret = provider.secret()
        bogus = "bogus-secret-that-must-not-be-logged"
        admin_token = provider.admin_token
        assert send(s, provider, "k1").status_code == 200
        bad = s.post(
            f"{provider.url}/v1/messages",
            json=message(),
            headers={"Idempotency-Key": "k2", "Authorization": f"Bearer {bogus}"},
            timeout=5,
        )
        assert bad.status_code == 401
        provider.admin.assert_records(1, outcome="unauthenticated")
        cmdline = Path(f"/proc/{provider.pid}/cmdline").read_bytes()
        provider.stop()
    files = [p for p in tmp_path.iterdir() if p.is_file()]
    assert log in files
    assert provider.stderr_path in files
    for path in [*files, Path(f"{log}-wal")]:
        data = path.read_bytes() if path.exists() else b""
        for needle in (secret, bogus, admin_token):
            assert needle.encode() not in data, f"{needle!r} found in {path.name}"
    for needle in (secret, admin_token):
        assert needle.encode() not in cmdline


def test_destination_out_of_scope_is_403_refused(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A destination outside the credential's scope globs gets 403 and a `refused` record."""
    response = send(session, provider, "k1", message(destination="cust_9"))
    assert (response.status_code, response.json()["error"]) == (403, "destination out of scope")
    assert response.json()["reason"] == "destination out of scope: 'cust_9' is outside acct_*"
    [record] = provider.admin.assert_records(1, outcome="refused")
    assert record.reason == response.json()["reason"]
    assert (record.credential_id, record.destination, record.status_code) == (
        "worker",
        "cust_9",
        403,
    )
    assert provider.admin.accepted() == []


def test_missing_idempotency_key_is_400(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A POST without Idempotency-Key gets 400 and creates no effect."""
    response = send(session, provider, None)
    assert (response.status_code, response.json()) == (
        400,
        {"error": "missing idempotency key", "reason": "no Idempotency-Key header"},
    )
    assert provider.admin.accepted() == []


@pytest.mark.parametrize("field", ["delivery_id", "body", "recognizer"])
def test_a_harness_field_is_not_required(
    provider: ProviderProcess, session: requests.Session, field: str
) -> None:
    """No harness field is required any more (issue 24): a send without one is processed
    as the real provider would, and still attributed by the rest."""
    body = message()
    del body[field]
    response = send(session, provider, "k1", body)
    assert response.status_code == 200
    [record] = provider.admin.accepted()
    assert (record.run_id, record.destination, record.reason) == ("run-1", "acct_1", None)


def test_a_send_without_run_is_accepted_and_logged_unattributed_naming_the_rule(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A send whose run the rule cannot read is accepted (the provider would) and its record
    says which rule found nothing where, so the harness can show it."""
    body = message()
    del body["run_id"], body["delivery_id"]
    response = send(session, provider, "k1", body)
    assert response.status_code == 200
    [record] = provider.admin.accepted()
    assert record.unattributed
    assert record.reason is not None
    assert "run rule found no value" in record.reason
    assert "json:/run_id: the body has no key 'run_id'" in record.reason
    assert "header:X-Run-Id" in record.reason


def test_a_send_without_destination_outside_a_scoped_credential_is_refused_naming_the_rule(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Without a destination a scoped credential cannot allow it: 403, and the reason says
    which rule found no destination."""
    body = message()
    del body["destination"]
    response = send(session, provider, "k1", body)
    assert response.status_code == 403
    reason = response.json()["reason"]
    assert reason.startswith("destination out of scope: no destination (json:/destination")
    assert provider.admin.accepted() == []


def test_fresh_message_is_accepted_with_provider_id(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A new key gets 200 with a msg_ id, and one `fresh` record with every field filled."""
    response = send(session, provider, "k1")
    assert response.status_code == 200
    reply = response.json()
    assert reply["status"] == "accepted"
    assert reply["destination"] == "acct_1"
    assert reply["id"].startswith("msg_")
    assert len(reply["id"]) == len("msg_") + 16
    assert "Idempotent-Replayed" not in response.headers
    [record] = provider.admin.accepted()
    assert record == Effect(
        seq=record.seq,
        epoch=provider.admin.health()["epoch"],
        received_at=record.received_at,
        credential_id="worker",
        destination="acct_1",
        run_id="run-1",
        delivery_id="d-1",
        idempotency_key="k1",
        payload_hash=record.payload_hash,
        recognizer="rec-1",
        outcome="fresh",
        provider_message_id=reply["id"],
        fault=None,
        status_code=200,
        body_hash=body_hash("hello"),
    )
    assert record.payload_hash is not None
    assert len(record.payload_hash) == 64


def test_same_key_same_payload_replays_original(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A repeat within the window replays the original reply byte for byte, marked replayed."""
    first = send(session, provider, "k1")
    again = send(session, provider, "k1")
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    provider.admin.assert_effects(1, outcome="fresh")
    [dup] = provider.admin.assert_records(1, outcome="deduplicated")
    assert dup.provider_message_id == first.json()["id"]
    assert len(provider.admin.accepted()) == 1


def test_payload_hash_ignores_key_order(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """The same fields in another order are the same payload, so they are deduplicated."""
    send(session, provider, "k1")
    reordered = dict(reversed(list(message().items())))
    headers = {**provider.auth_headers(), "Idempotency-Key": "k1"}
    response = session.post(
        f"{provider.url}/v1/messages", data=json.dumps(reordered), headers=headers, timeout=5
    )
    assert response.headers["Idempotent-Replayed"] == "true"


def test_same_key_different_payload_is_422(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Reusing a key with a different body gets 422, is logged `rejected`, creates nothing."""
    send(session, provider, "k1")
    response = send(session, provider, "k1", message(body="changed"))
    assert response.status_code == 422
    assert response.json()["error"] == "idempotency key reused with different parameters"
    assert "differs in: body" in response.json()["reason"]
    provider.admin.assert_records(1, outcome="rejected", idempotency_key="k1")
    assert len(provider.admin.accepted()) == 1


def test_key_expires_after_window(provider: ProviderProcess, session: requests.Session) -> None:
    """After the window passes on the provider clock, the same key is a new effect."""
    first = send(session, provider, "k1").json()["id"]
    provider.admin.advance_clock(WINDOW_S - 60)
    assert send(session, provider, "k1").headers.get("Idempotent-Replayed") == "true"
    provider.admin.advance_clock(60)
    again = send(session, provider, "k1")
    assert again.status_code == 200
    assert "Idempotent-Replayed" not in again.headers
    assert again.json()["id"] != first
    [expired] = provider.admin.assert_effects(1, outcome="expired_then_accepted")
    assert expired.provider_message_id == again.json()["id"]
    assert [e.outcome for e in provider.admin.accepted()] == ["fresh", "expired_then_accepted"]


def test_same_key_from_two_tenants_is_two_effects(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Idempotency keys are scoped to the credential: two tenants never collide."""
    mine = send(session, provider, "shared-key")
    theirs = send(session, provider, "shared-key", credential="other")
    assert mine.json()["id"] != theirs.json()["id"]
    assert {e.credential_id for e in provider.admin.accepted()} == {"worker", "other"}


def test_lookup_finds_own_message_only(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Lookup returns the accepted message for the caller's key; others see 404."""
    sent = send(session, provider, "k1").json()
    found = lookup(session, provider, "k1")
    assert found.status_code == 200
    assert found.json() == {
        "id": sent["id"],
        "status": "accepted",
        "destination": "acct_1",
        "run_id": "run-1",
        "idempotency_key": "k1",
    }
    missing = lookup(session, provider, "never-sent")
    assert (missing.status_code, missing.json()) == (404, {"error": "not found"})
    other = lookup(session, provider, "k1", credential="other")
    assert other.status_code == 404
    assert len(provider.admin.effects()) == 1, "lookups must not be logged as effects"


def test_lookup_requires_credential(provider: ProviderProcess, session: requests.Session) -> None:
    """Lookup without a credential gets 401 and leaks nothing."""
    send(session, provider, "k1")
    response = session.get(
        f"{provider.url}/v1/messages", params={"idempotency_key": "k1"}, timeout=5
    )
    assert (response.status_code, response.json()) == (401, {"error": "unauthenticated"})


def test_concurrent_same_key_is_accepted_once(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Many simultaneous requests with one key create exactly one effect, all with one id."""

    def one(_: int) -> str:
        with requests.Session() as s:
            response = send(s, provider, "race")
            assert response.status_code == 200
            return str(response.json()["id"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = set(pool.map(one, range(16)))
    assert len(ids) == 1
    assert len(provider.admin.accepted()) == 1
    provider.admin.assert_records(15, outcome="deduplicated")


def test_admin_needs_token_but_health_does_not(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """Admin endpoints answer 401 without X-Admin-Token; health answers anyone."""
    for method, path in [
        ("GET", "/_admin/effects"),
        ("POST", "/_admin/reset"),
        ("POST", "/_admin/faults"),
        ("DELETE", "/_admin/faults"),
        ("POST", "/_admin/clock"),
    ]:
        response = session.request(method, provider.url + path, json={}, timeout=5)
        assert response.status_code == 401, path
    wrong = session.get(
        f"{provider.url}/_admin/effects", headers={"X-Admin-Token": "nope"}, timeout=5
    )
    assert wrong.status_code == 401
    health = session.get(f"{provider.url}/_admin/health", timeout=5)
    assert health.json() == {"ok": True, "epoch": provider.admin.health()["epoch"]}


def test_reset_starts_new_epoch(provider: ProviderProcess, session: requests.Session) -> None:
    """Reset hides earlier records by default, keeps them under epoch=all, forgets keys."""
    old_epoch = provider.admin.health()["epoch"]
    send(session, provider, "k1")
    new_epoch = provider.admin.reset()
    assert new_epoch == old_epoch + 1
    assert provider.admin.health()["epoch"] == new_epoch
    assert provider.admin.effects() == []
    again = send(session, provider, "k1")
    assert "Idempotent-Replayed" not in again.headers
    [current] = provider.admin.accepted()
    assert (current.epoch, current.outcome) == (new_epoch, "fresh")
    [old] = provider.admin.effects(epoch=old_epoch)
    assert old.idempotency_key == "k1"
    everything = provider.admin.effects(epoch="all")
    assert [e.seq for e in everything] == sorted(e.seq for e in everything)
    assert {old.seq, current.seq} <= {e.seq for e in everything}


def test_effect_filters(provider: ProviderProcess, session: requests.Session) -> None:
    """Filters narrow the records; a list value matches any of its items."""
    send(session, provider, "a", message(run_id="run-a", destination="acct_a"))
    send(session, provider, "b", message(run_id="run-b", recognizer="rec-b"))
    send(session, provider, "b", message(run_id="run-b", recognizer="rec-b"))
    assert [e.idempotency_key for e in provider.admin.effects(run_id="run-a")] == ["a"]
    assert len(provider.admin.effects(destination="acct_a")) == 1
    assert len(provider.admin.effects(recognizer="rec-b")) == 2
    assert len(provider.admin.effects(idempotency_key="b", outcome="deduplicated")) == 1
    assert len(provider.admin.effects(outcome=["fresh", "deduplicated"])) == 3
    assert len(provider.admin.accepted(run_id="run-b")) == 1


def test_assert_effects_lists_what_it_found(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """A failed count assertion names the filters and shows each record found."""
    send(session, provider, "k1", message(run_id="run-x"))
    with pytest.raises(AssertionError, match=r"expected 2 effect\(s\) matching run_id='run-x'"):
        provider.admin.assert_effects(2, run_id="run-x")
    with pytest.raises(AssertionError) as failure:
        provider.admin.assert_effects(0, run_id="run-x")
    assert "outcome=fresh" in str(failure.value)
    assert "key='k1'" in str(failure.value)


def test_assert_effects_counts_effects_and_assert_records_counts_records(
    provider: ProviderProcess, session: requests.Session
) -> None:
    """The same key twice inside the window: one effect (what the person received), two
    records (what the provider logged); asking assert_effects for a deduplicated outcome is a
    usage error that names assert_records."""
    send(session, provider, "k-twice", message(run_id="run-twice"))
    send(session, provider, "k-twice", message(run_id="run-twice"))
    assert len(provider.admin.assert_effects(1, run_id="run-twice")) == 1
    assert len(provider.admin.assert_records(2, run_id="run-twice")) == 2
    with pytest.raises(AssertionError, match=r"expected 2 effect\(s\)"):
        provider.admin.assert_effects(2, run_id="run-twice")
    with pytest.raises(TypeError, match="assert_records"):
        provider.admin.assert_effects(1, outcome="deduplicated")
