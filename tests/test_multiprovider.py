"""Several named providers in one campaign (``[provider.NAME]``), and any preset for a system
of one's own: a crash between the two sends of one job, both providers' effects counted, a
resend blamed on the provider it reached, faults on the provider they name."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.engine.case.campaign import CampaignResult, CampaignSettings, run_campaign
from harness.engine.plan import scenario
from harness.engine.plan.schedule import CaseSpec, Step
from harness.errors import BadInputError
from harness.invariants import EffectRow, Observation, Policy, Status
from harness.invariants import exactly_once_effect as eo
from harness.invariants._model import LedgerSnapshot
from harness.worker_config import ProviderEndpoint, WorkerConfig

TWO = """
[scenario]
system = "{system}"
seed = 7

[workload]
runs = 2
destinations_per_topic = 2

[provider.hooks]
preset = "webhook"
faults = []

[provider.pay]
preset = "payments"
faults = []

[cases]
mode = "list"
list = {cases}
"""


def _scenario(tmp_path: Path, system: str, cases: list[str]) -> scenario.Scenario:
    path = tmp_path / "two.toml"
    path.write_text(TWO.format(system=system, cases=json.dumps(cases)))
    return scenario.load(path)


def _run(tmp_path: Path, system: str, cases: list[str]) -> dict[str, dict[str, Any]]:
    result = _result(tmp_path, system, cases)
    return {c.spec.id: c.to_json() for c in result.cases}


def test_a_crash_between_two_providers_sends_counts_both(tmp_path: Path) -> None:
    cases = _run(
        tmp_path,
        "tests._two_providers:CORRECT",
        ["baseline", "crash@between_sends#1", "crash@after_send#1", "restore_backup@after_send#3"],
    )
    for case_id, case in cases.items():
        assert case["verdict"] == "pass", (case_id, case["notes"], case["invariants"])
        # each job's first destination went to hooks, its second to pay: both counted
        by = case["effects"]["by_provider"]
        assert list(by) == ["hooks", "pay"]
        assert by["hooks"]["accepted"] == 2, case_id
        assert by["pay"]["accepted"] == 2, case_id
        assert case["effects"]["accepted"] == case["effects"]["intended"] == 4
    assert all(r["landing"] == "landed" for r in cases["crash@between_sends#1"]["landings"])


def _result(tmp_path: Path, system: str, cases: list[str]) -> CampaignResult:
    sc = _scenario(tmp_path, system, cases)
    settings = CampaignSettings(
        system=sc.checked_system(),
        seed=sc.seed or 0,
        cases=list(sc.cases),
        workdir=tmp_path / "work",
        **sc.campaign_fields(),
    )
    return run_campaign(settings)


def test_a_resend_on_restart_fails_exactly_once_naming_the_provider(tmp_path: Path) -> None:
    result = _result(tmp_path, "tests._two_providers:NAIVE", ["crash@after_send#1"])
    cases = {c.spec.id: c.to_json() for c in result.cases}
    case = cases["crash@after_send#1"]
    assert case["verdict"] == "fail"
    check = case["invariants"]["exactly_once_effect"]
    assert check["status"] == "fail"
    assert "through provider hooks" in check["summary"]
    (dup,) = check["evidence"]["duplicates"]
    assert dup["providers"] == ["hooks"]
    assert {e["provider"] for e in dup["effects"]} == {"hooks"}
    assert case["effects"]["by_provider"]["hooks"]["accepted"] == 3
    # a resend under the intended run is on an intended delivery (exactly_once_effect's),
    # not an unintended effect
    assert case["effects"]["by_provider"]["hooks"]["on_intended"] == 3
    assert case["effects"]["unintended"] == 0
    assert case["invariants"]["no_unintended_effect"]["status"] == "pass"
    # every report format shows each provider's effects apart
    from harness.reports import schema_errors, to_json, write_all

    report = to_json(result)
    assert schema_errors(report) == []
    paths = write_all(report, tmp_path / "r")
    markdown = paths["md"].read_text()
    assert re.search(r"effect hooks#\d+ repeats hooks#\d+", markdown), markdown
    assert (
        "hooks: 3 accepted of 3 request(s) (3 on intended deliveries, 0 unintended),"
        " pay: 2 accepted of 2 request(s) (2 on intended deliveries, 0 unintended)"
    ) in markdown
    assert "hooks: 3 accepted" in paths["junit"].read_text()
    page = paths["html"].read_text()
    assert re.search(r'id="[^"]*-effect-hooks-\d+"', page)
    labels = [e["label"] for e in report["cases"][0]["timeline"] if e["kind"] == "effect"]
    assert any(label.endswith(" at pay") for label in labels), labels
    assert any(label == "fresh (duplicate) at hooks" for label in labels), labels


@pytest.mark.parametrize(("named", "other"), [("pay", "hooks"), ("hooks", "pay")])
def test_a_provider_fault_lands_on_the_named_provider_only(
    tmp_path: Path, named: str, other: str
) -> None:
    case_id = f"provider_5xx@{named}:1"
    case = _run(tmp_path, "tests._two_providers:CORRECT", [case_id])[case_id]
    assert case["verdict"] == "pass", (case["notes"], case["landings"])
    (landing,) = case["landings"]
    assert landing["landing"] == "landed"
    assert f"provider {named} applied status" in landing["detail"]
    by = case["effects"]["by_provider"]
    assert by[named]["requests"] == 3  # the refused send, then its retry
    assert by[other]["requests"] == 2  # untouched


def test_named_providers_load_with_their_own_settings(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[scenario]\nsystem = "tests._two_providers:CORRECT"\n'
        '[provider.mail]\npreset = "smtp"\n'
        '[provider.hooks]\npreset = "webhook"\nwindow_s = 60\n'
        "[provider.hooks.options]\ndedupe = false\n"
        '[cases]\nmode = "list"\nlist = ["provider_5xx@hooks:2"]\n'
    )
    sc = scenario.load(path)
    assert sc.provider_names() == ["mail", "hooks"]
    assert (sc.provider_name, sc.provider_preset) == ("mail", "smtp")
    (hooks,) = sc.more_providers
    assert (hooks.preset, hooks.window_s, hooks.options) == ("webhook", 60.0, {"dedupe": False})
    assert sc.cases[0].steps[0] == Step("provider_5xx", arg="2", provider="hooks")
    sc.checked_system()


def test_a_single_provider_is_named_after_its_preset(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[scenario]\nsystem = "reference"\n[provider]\npreset = "chat"\n')
    sc = scenario.load(path)
    assert sc.provider_name is None
    assert sc.more_providers == ()
    assert sc.provider_names() == ["chat"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[provider]\npreset = "payments"\n[provider.mail]\npreset = "smtp"\n',
            r"s\.toml:\d+: \[provider\.preset\] give one \[provider\] table or named",
        ),
        ('[provider.Mail]\npreset = "smtp"\n', r"\[provider\.Mail\] provider name 'Mail'"),
        (
            '[provider.a-b]\npreset = "smtp"\n[provider.a_b]\npreset = "chat"\n',
            r"are one environment name \(A_B\)",
        ),
        ('[provider.mail]\npreset = "telex"\n', r"\[provider\.mail\.preset\] unknown preset"),
        ('[provider.mail]\npreset = "smtp"\nwindow = 3\n', r"\[provider\.mail\.window\] unknown"),
        (
            '[provider.mail]\npreset = "smtp"\ncredentials = "per-topic"\n'
            '[provider.pay]\npreset = "payments"\ncredentials = "shared"\n',
            r"every provider grants the same credentials",
        ),
    ],
)
def test_bad_named_providers_are_refused_in_one_line(
    tmp_path: Path, body: str, message: str
) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[scenario]\nsystem = "tests._two_providers:CORRECT"\n' + body)
    with pytest.raises(scenario.ScenarioError, match=message):
        scenario.load(path)


def test_a_case_naming_no_such_provider_is_refused(tmp_path: Path) -> None:
    sc = _scenario(tmp_path, "tests._two_providers:CORRECT", ["provider_5xx@mail:1"])
    with pytest.raises(
        BadInputError, match=r"no provider named 'mail'; expected one of hooks, pay"
    ):
        sc.checked_system()


def test_only_a_provider_fault_names_a_provider() -> None:
    with pytest.raises(BadInputError, match="is not FAULT"):
        CaseSpec.parse("crash@after_claim")
    assert CaseSpec.parse("provider_timeout@mail-out").id == "provider_timeout@mail-out"


def test_any_preset_for_a_system_of_ones_own(tmp_path: Path) -> None:
    """The reference's adapter list limits only the reference."""
    path = tmp_path / "hook.toml"
    path.write_text(
        '[scenario]\nsystem = "tests._two_providers:CORRECT"\n[provider]\npreset = "webhook"\n'
    )
    assert scenario.load(path).checked_system().speaks is None
    path.write_text('[scenario]\nsystem = "reference"\n[provider]\npreset = "webhook"\n')
    with pytest.raises(
        scenario.ScenarioError, match=r"hook\.toml:4: \[provider\.preset\] system 'reference'"
    ):
        scenario.load(path).checked_system()


def test_each_provider_reaches_an_execd_worker_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.engine.store._db import DatabaseTarget

    config = WorkerConfig(
        db=DatabaseTarget(url="sqlite:///x.sqlite"),
        provider_url="http://127.0.0.1:1/epoch/3",
        credential_id="worker",
        credential_secret="s3cret",
        destination_scope="*",
        worker_name="w1",
        providers={
            "hooks": ProviderEndpoint(
                "hooks", "webhook", "http://127.0.0.1:1/epoch/3", None, "worker", "s3cret"
            ),
            "mail-out": ProviderEndpoint(
                "mail-out", "smtp", "http://127.0.0.1:2/epoch/5", 2525, "worker", "s3cret"
            ),
        },
    )
    env = config.to_env()
    assert env["CRASH_HARNESS_PROVIDER_MAIL_OUT_URL"] == "http://127.0.0.1:2/epoch/5"
    assert env["CRASH_HARNESS_PROVIDER_MAIL_OUT_SMTP_PORT"] == "2525"
    assert env["CRASH_HARNESS_PROVIDER_HOOKS_PRESET"] == "webhook"
    assert "s3cret" not in env["CRASH_HARNESS_WORKER"]  # secrets travel apart
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    back = WorkerConfig.from_env()
    assert back == config
    assert back.provider("mail-out").smtp_port == 2525
    with pytest.raises(KeyError, match="it has: hooks, mail-out"):
        back.provider("mail")


def test_effects_are_counted_across_providers_in_one_normal_form() -> None:
    """A recipient reached once through each of two providers for one run was reached twice."""
    effects = (
        EffectRow(1, "alice@example.com", "r1", "d1", "k1", "fresh", provider="hooks"),
        EffectRow(1, "alice@example.com", "r1", "d1", "k1", "fresh", provider="mail"),
        EffectRow(2, "bob@example.com", "r1", "d2", "k2", "fresh", provider="mail"),
    )
    ledger = LedgerSnapshot(frozenset(), {}, (), frozenset(), ())
    policy = Policy(1.0, (1.0,), 1, 1.0, providers=("hooks", "mail"))
    result = eo.check(Observation({"r1": ()}, ledger, effects, policy=policy))
    assert result.status is Status.FAIL
    assert "through provider hooks, mail" in result.summary


def test_each_provider_is_judged_by_its_own_window() -> None:
    """A key reused 400 s after its first use is inside the payments API's 24 h window: the
    queue's 5 minutes beside it must not blame that retry."""
    from harness.invariants import retry_within_window as rw
    from harness.invariants._model import ProviderPolicy

    effects = (
        EffectRow(1, "a@x", "r1", "d1", "k1", "failed_by_fault", received_at=0.0, provider="pay"),
        EffectRow(2, "a@x", "r1", "d1", "k1", "fresh", received_at=400.0, provider="pay"),
        EffectRow(1, "b@x", "r1", "d2", "k2", "fresh", received_at=0.0, provider="queue"),
    )
    per = {
        "queue": ProviderPolicy(keys=True, lookup=False, window_s=300.0),
        "pay": ProviderPolicy(keys=True, lookup=True, window_s=86_400.0),
    }
    policy = Policy(1.0, (1.0,), 3, 1.0, provider_window_s=300.0, providers=("queue", "pay"))
    ledger = LedgerSnapshot(frozenset(), {}, (), frozenset(), ())
    judged_as_one = rw.check(Observation({"r1": ()}, ledger, effects, policy=policy))
    assert judged_as_one.status is Status.FAIL  # what one window for all would say
    each = Policy(**{**policy.__dict__, "per_provider": per})
    result = rw.check(Observation({"r1": ()}, ledger, effects, policy=each))
    assert result.status is Status.PASS, result.summary
    assert set(result.evidence["by_provider"]) == {"queue", "pay"}


def test_a_webhook_scenario_for_a_simple_system_checks_and_runs(tmp_path: Path) -> None:
    """The done-when of issue 24: ``preset = "webhook"`` with a ``simple_system``."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    path = tmp_path / "hook.toml"
    path.write_text(
        '[scenario]\nsystem = "tests._two_providers:WEBHOOK"\nseed = 3\n'
        '[provider]\npreset = "webhook"\n'
        '[cases]\nmode = "list"\nlist = ["baseline", "crash@after_send#1"]\n'
    )
    check = subprocess.run(
        [sys.executable, "-m", "harness", "scenarios", "check", str(path)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    ran = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(path), "--report-dir", str(tmp_path / "r")],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [c["verdict"] for c in report["cases"]] == ["pass", "pass"]


def test_each_providers_epoch_is_audited_and_named() -> None:
    """A reset of the second provider's epoch that the harness did not make is evidence
    against the case, and the note names that provider."""
    from harness.engine.case import _provider_watch
    from harness.engine.case.run import _check_epoch

    class _Admin:
        def audit(self, epoch: int) -> dict[str, Any]:
            return {"current_epoch": epoch + 1, "intact": True}

    class _Provider:
        preset = "chat"
        admin = _Admin()

    class _Ctx:
        def __init__(self, providers: dict[str, Any]) -> None:
            self.providers = providers
            self.notes: list[str] = []
            self.provider_doubts: list[str] = []
            self.recorded: list[str] = []

        def record(self, event: str, **detail: Any) -> None:
            self.recorded.append(event)

    talk = _Provider()
    _provider_watch.name(talk, "talk")  # type: ignore[arg-type]
    ctx = _Ctx({"pay": object(), "talk": talk})
    _check_epoch(ctx, talk, 4)  # type: ignore[arg-type]
    assert ctx.provider_doubts == ["provider talk's epoch moved from 4 to 5"]
    assert ctx.recorded == ["provider_epoch_changed"]


def _effect(provider: str, seq: int, repeats: tuple[str, int] | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {"seq": seq, "provider": provider}
    if repeats is not None:
        detail |= {"repeats_provider": repeats[0], "repeats": repeats[1]}
    return {"lane": "provider", "kind": "effect", "label": "fresh", "detail": detail}


def test_each_providers_records_are_numbered_from_its_own_first() -> None:
    """Each provider numbers its own log: an earlier case's race that logged two more
    records at ``hooks`` shifts hooks' numbers, never pay's, and the content agrees."""
    from harness.engine.search.determinism import content, first_difference

    def report(hooks_first: int) -> dict[str, Any]:
        timeline = [
            _effect("hooks", hooks_first),
            _effect("pay", 3),
            _effect("hooks", hooks_first + 1, repeats=("hooks", hooks_first)),
        ]
        return {"cases": [{"id": "crash@after_send#1", "timeline": timeline}]}

    assert first_difference(content(report(5)), content(report(7))) is None
    # a record that really moved within its provider's log is still a difference
    moved = report(5)
    moved["cases"][0]["timeline"][2]["detail"]["repeats"] = 6
    assert first_difference(content(report(5)), content(moved)) is not None


def test_two_runs_of_one_seed_with_two_providers_write_the_same_content(tmp_path: Path) -> None:
    """The effects now say their provider; two runs of one seed still agree on content."""
    from harness.engine.search.determinism import content, first_difference
    from harness.reports import to_json

    cases = ["baseline", "crash@after_send#1"]
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
    first, second = (
        content(to_json(_result(tmp_path / run, "tests._two_providers:NAIVE", cases)))
        for run in ("a", "b")
    )
    assert any("provider" in e for c in first["cases"] for e in _effects_of(c))
    assert first_difference(first, second) is None


def _effects_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    dups = case["invariants"]["exactly_once_effect"]["evidence"].get("duplicates") or []
    return [e for d in dups for e in d["effects"]]


def test_what_a_system_speaks_and_the_preset_facts_it_relies_on_are_two_fields() -> None:
    """``System.presets`` is the facts a system relies on (a mapping); ``System.speaks`` the
    presets its worker can talk to: the reference (and the reference run as a program) speak
    their adapters' presets, a program of one's own any."""
    from harness.presets import PresetFacts
    from harness.systems import command_system, resolve

    reference = resolve("reference")
    assert reference.speaks == ("payments", "queue-fifo", "chat", "smtp")
    assert reference.presets is not None
    assert all(isinstance(f, PresetFacts) for f in reference.presets.values())
    assert resolve("mutant:ack_before_send").speaks == reference.speaks
    as_program = command_system("python -m harness.reference")
    assert (as_program.speaks, as_program.presets) == (reference.speaks, reference.presets)
    assert command_system("python -m myapp.worker").speaks is None


def test_a_racing_fault_pinned_to_another_providers_delivery_says_so(tmp_path: Path) -> None:
    """In a race a provider fault is pinned to a (run, destination) drawn from every
    intended delivery (``pinned_delivery``); with several providers the worker may send that
    one through another provider, and the fault cannot land. Never a pass: the case is a
    gap, and the landing says why."""
    from harness.engine.case.campaign import Campaign
    from harness.faults.provider import pinned_delivery
    from tests._two_providers import ROUTE

    probe = _scenario(tmp_path, "tests._two_providers:CORRECT", ["baseline"])
    settings = CampaignSettings(
        system=probe.checked_system(), seed=7, workdir=tmp_path / "w0", **probe.campaign_fields()
    )
    with Campaign(settings) as campaign:
        intended = campaign.workload.intended()

    def routed_to(pick: dict[str, str]) -> str:
        return ROUTE[sorted(intended[pick["run_id"]]).index(pick["destination"])]

    case_id = next(
        cid
        for n in range(2, 9)
        if routed_to(
            pinned_delivery(
                7,
                cid := f"concurrent_claim:{n}+provider_5xx@pay",
                1,
                intended,
                roster_may_change=False,
            )
        )
        == "hooks"
    )
    case = _run(tmp_path, "tests._two_providers:CORRECT", [case_id])[case_id]
    assert case["verdict"] != "pass"
    (fault,) = [r for r in case["landings"] if r["step"].startswith("provider_5xx")]
    assert fault["landing"] != "landed"
    assert "which the worker may send through another provider than pay" in fault["detail"]
