"""A case's notes carry the provider's reasons, not a bare ``400 Client Error`` (issue 24)."""

from __future__ import annotations

from pathlib import Path

import requests

from fake_providers import FaultRule, ProviderProcess
from harness.engine.case._provider_reasons import reason_notes


def test_refused_and_unattributed_requests_become_counted_notes_and_faults_do_not(
    tmp_path: Path,
) -> None:
    with ProviderProcess.start(
        log_path=tmp_path / "effects.sqlite",
        preset="payments",
        credentials={"worker": ("w-" + "s" * 30, ["acct_*"])},
    ) as provider:
        url = f"{provider.url}/v1/messages"
        body = {"destination": "acct_1", "run_id": "r1", "delivery_id": "d1", "body": "x"}
        for _ in range(2):  # the same missing header twice: one note, counted
            requests.post(url, json=body, headers=provider.auth_headers(), timeout=5)
        requests.post(
            url,
            json={"destination": "acct_1", "body": "no run"},
            headers={**provider.auth_headers(), "Idempotency-Key": "k2"},
            timeout=5,
        )
        provider.admin.set_faults([FaultRule(fault="status", status=503)])
        injected = requests.post(
            url, json=body, headers={**provider.auth_headers(), "Idempotency-Key": "k3"}, timeout=5
        )
        assert injected.status_code == 503
        provider.admin.assert_records(1, outcome="failed_by_fault")
        notes = reason_notes(provider.admin.effects())
    assert notes[0] == "provider: 2 request(s) rejected 400: no Idempotency-Key header"
    assert notes[1].startswith(
        "provider: 1 request(s) accepted, unattributed 200: unattributed: run rule found no value"
    )
    assert len(notes) == 2
