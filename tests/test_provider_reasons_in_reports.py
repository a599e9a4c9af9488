"""The provider's reasons for refusing a request reach every report format (issue 24: "the
case note showed only 400 Client Error"), for a case that passed as much as for one that
did not: a worker that recovered from a refusal still sent something its provider refused."""

from __future__ import annotations

import pytest
import requests

from harness.engine.case.campaign import CampaignSettings, run_campaign
from harness.engine.plan.schedule import CaseSpec
from harness.invariants import Status
from harness.reports import schema_errors, to_json, write_all
from harness.usersystem import boundary, jobs, simple_system
from harness.worker_config import WorkerConfig

#: the part of the payments preset's reason that names the rule and the field that differed
REASON = "was first used with other parameters"


def _reuses_a_key(config: WorkerConfig) -> None:
    """Each job as it should be, then once more under its key with another body: the
    provider refuses that (422) and changes nothing, so the case passes."""
    for job in list(jobs(config)):
        requests.post(job.url, json=job.message, headers=job.headers, timeout=5)
        boundary("after_provider_accept")
        edited = {**job.message, "body": job.message["body"] + " (edited)"}
        refused = requests.post(job.url, json=edited, headers=job.headers, timeout=5)
        assert refused.status_code == 422, refused.text


SYSTEM = simple_system(_reuses_a_key, name="t:REUSES_A_KEY", boundaries=["after_provider_accept"])


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("reasons")
    settings = CampaignSettings(
        system=SYSTEM,
        seed=2,
        workdir=tmp / "work",
        provider_preset="payments",
        provider_faults=(),
        runs=1,
        cases=[CaseSpec()],
    )
    result = run_campaign(settings)
    (case,) = result.cases
    assert case.verdict is Status.PASS, (case.invariants, case.notes)
    report = to_json(result)
    assert schema_errors(report) == []
    paths = write_all(report, tmp / "reports")
    return {kind: path.read_text() for kind, path in paths.items()}


@pytest.mark.parametrize("kind", ["json", "junit", "md", "html"])
def test_a_refusal_reason_is_in_every_format(written: dict[str, str], kind: str) -> None:
    assert REASON in written[kind], f"{kind} does not say why the provider refused"


def test_with_several_providers_each_reason_names_its_provider() -> None:
    """A case with ``[provider.hooks]`` and ``[provider.mail]``: the note says which one
    refused, and the reports' list keeps the name."""
    from harness.reports._common import provider_reasons

    notes = [
        "provider hooks: 1 request(s) unauthenticated 401: webhook-signature matches no credential",
        "provider: 2 request(s) rejected 400: no Idempotency-Key header",
        "worker w1 raised ...",
    ]
    report = {"cases": [{"id": "baseline", "notes": notes}, {"id": "c2", "notes": notes[:1]}]}
    assert provider_reasons(report) == [
        (
            "hooks: 1 request(s) unauthenticated 401: webhook-signature matches no credential",
            ["baseline", "c2"],
        ),
        ("2 request(s) rejected 400: no Idempotency-Key header", ["baseline"]),
    ]
