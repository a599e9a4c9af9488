"""Far-side crash points (#25 item 1): ``crash@accepted.NAME#k``.

The fake provider holds the reply to the k-th request it accepts (its effect committed), the
harness kills the worker's whole tree, and the worker dies with the effect accepted and
unrecorded, whatever it is written in. Real providers, real SIGKILL, real HTTP and SMTP.
"""

from __future__ import annotations

import os
import select
import smtplib
import subprocess
import sys
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import requests

from fake_providers import AdminClient, ProviderProcess
from harness import systems
from harness.engine.case.campaign import (
    Campaign,
    CampaignSettings,
    CaseSpec,
    run_campaign,
    validate_cases,
)
from harness.engine.process import _far_side
from harness.engine.search.sweep import sweep
from harness.errors import BadInputError
from harness.invariants import Status
from harness.systems import System, resolve
from tests._cli import run_harness
from tests._procs import wait_ready

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# -- the provider's hold -------------------------------------------------------------------

#: a sender in its own process: the provider must never answer it, so it blocks until killed
_HTTP_SENDER = """
import sys, requests
url, secret, key = sys.argv[1:4]
reply = requests.post(url + "/v1/messages", headers={"Authorization": "Bearer " + secret,
    "Idempotency-Key": key}, json={"destination": "acct_1", "run_id": "r1",
    "delivery_id": key, "body": "hello"}, timeout=600)
print("ANSWERED", reply.status_code, flush=True)
"""

_SMTP_SENDER = """
import sys, smtplib
from email.message import EmailMessage
port, secret = int(sys.argv[1]), sys.argv[2]
msg = EmailMessage()
msg["From"], msg["To"], msg["Subject"] = "w@sender.test", "alice@example.com", "hi"
msg["Message-ID"], msg["X-Run-Id"] = "<held@test>", "r1"
msg.set_content("hello")
with smtplib.SMTP("127.0.0.1", port, timeout=600) as client:
    client.login("worker", secret)
    client.send_message(msg)
print("ANSWERED", flush=True)
"""


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[ProviderProcess]:
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
        yield provider


def _post(provider: ProviderProcess, key: str, **headers: str) -> requests.Response:
    return requests.post(
        f"{provider.url}/v1/messages",
        headers={**provider.auth_headers(), "Idempotency-Key": key, **headers},
        json={"destination": "acct_1", "run_id": "r1", "delivery_id": key, "body": "hello"},
        timeout=10,
    )


def _sender(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )


def _held_then_killed(provider: ProviderProcess, sender: subprocess.Popen[str], epoch: int) -> Any:
    """Wait until the provider holds the sender's reply; the sender got none; kill it."""
    try:
        said = provider.admin.wait_held(epoch, timeout_s=30)
        assert said["holding"], said
        assert sender.poll() is None, "the sender was answered: its reply was not held"
    finally:
        sender.kill()
        out, _ = sender.communicate(timeout=30)
    assert "ANSWERED" not in out
    return said


def test_http_hold_counts_accepted_effects_only_and_never_answers(
    payments: ProviderProcess,
) -> None:
    """Request #2 *accepted* is held: a duplicate (deduplicated) and a refusal before it do
    not count; the held one is committed in the log, unanswered; the next one is answered."""
    epoch = payments.admin.reset()
    payments.admin.arm_hold(epoch, 2)
    assert _post(payments, "k1").status_code == 200  # accepted #1
    assert _post(payments, "k1").status_code == 200  # the same key: deduplicated, no count
    refused = requests.post(
        f"{payments.url}/v1/messages", json={"destination": "acct_1"}, timeout=10
    )
    assert refused.status_code == 401  # refused: no count
    sender = _sender(_HTTP_SENDER, payments.url, payments.secret(), "k2")
    said = _held_then_killed(payments, sender, epoch)
    assert (said["nth"], said["counted"]) == (2, 2)
    held = payments.admin.assert_effects(1, idempotency_key="k2")[0]
    assert held.seq == said["seq"]
    assert _post(payments, "k3").status_code == 200  # one hold, one request: the rest answered
    assert payments.admin.drain(epoch, timeout_s=10)["drained"]


def test_hold_of_another_epoch_is_refused(payments: ProviderProcess) -> None:
    epoch = payments.admin.reset()
    with pytest.raises(Exception, match="409"):
        payments.admin.arm_hold(epoch + 1, 1)
    with pytest.raises(Exception, match="400"):
        payments.admin.arm_hold(epoch, 0)


def test_smtp_hold_keeps_the_final_250_after_logging(tmp_path: Path) -> None:
    """The mail is logged (one record per recipient) before the reply to end-of-DATA, which
    the provider holds: the sender is never told 250; a later mail is."""
    credentials = {"worker": ("w-" + "a" * 30, ["*@example.com"])}
    with ProviderProcess.start(
        log_path=tmp_path / "smtp.sqlite", preset="smtp", credentials=credentials
    ) as smtp:
        assert smtp.smtp_port is not None
        epoch = smtp.admin.reset()
        smtp.admin.arm_hold(epoch, 1)
        sender = _sender(_SMTP_SENDER, str(smtp.smtp_port), smtp.secret())
        said = _held_then_killed(smtp, sender, epoch)
        (held,) = smtp.admin.assert_effects(1, idempotency_key="<held@test>")
        assert held.seq == said["seq"]
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "w@sender.test", "bob@example.com", "next"
        msg.set_content("next")
        with smtplib.SMTP("127.0.0.1", smtp.smtp_port, timeout=10) as client:
            client.login("worker", smtp.secret())
            client.send_message(msg)  # answered 250: the hold held one reply only
        smtp.admin.assert_effects(2)


# -- the engine ----------------------------------------------------------------------------


def _one(system: System, case: str, tmp_path: Path, **settings: Any) -> Any:
    result = run_campaign(
        CampaignSettings(
            system=system, seed=7, workdir=tmp_path, cases=[CaseSpec.parse(case)], **settings
        )
    )
    (found,) = result.cases
    return found


def test_reference_passes_at_the_first_accepted_request(tmp_path: Path) -> None:
    """The single unnamed ``[provider]`` is named after its preset: ``accepted.payments``.
    The kill is a planned crash there, a fresh worker finishes, every invariant holds."""
    case = _one(systems.resolve("reference"), "crash@accepted.payments#1", tmp_path)
    assert case.verdict is Status.PASS, case.notes
    assert [w.kind.value for w in case.workers] == ["crashed_as_planned", "completed"]
    assert (case.workers[0].boundary, case.workers[0].hit) == ("accepted.payments", 1)
    assert [r.landing.value for r in case.step_records] == ["landed"]
    assert case.crash_fired
    # every accepted effect is a hit of the far-side point (the held one included, once)
    assert case.reached["accepted.payments"] == case.accepted == 6


def _outbox(module: str) -> System:
    sys.path.insert(0, str(EXAMPLES / "outbox"))
    try:
        return resolve(f"{module}:SYSTEM")
    finally:
        sys.path.remove(str(EXAMPLES / "outbox"))


#: the outbox example's provider: it dedupes nothing and injects nothing
_OUTBOX = {"provider_window_s": 0, "provider_faults": (), "worker_overrides": {"max_attempts": 1}}


@pytest.mark.parametrize(
    ("module", "verdict"), [("outbox_worker", "fail"), ("outbox_fixed", "pass")]
)
def test_naive_outbox_duplicates_at_the_far_side_point(
    module: str, verdict: str, tmp_path: Path
) -> None:
    """Accepted but not yet recorded, found with no ``boundary()`` at all: the naive outbox
    sends again after the restart (exactly_once_effect fails); the fixed one looks first."""
    case = _one(_outbox(module), "crash@accepted.payments#1", tmp_path, **_OUTBOX)
    assert [r.landing.value for r in case.step_records] == ["landed"]
    assert case.verdict.value == verdict, case.notes
    broken = {n for n, r in case.invariants.items() if r.status is Status.FAIL}
    assert broken == ({"exactly_once_effect"} if verdict == "fail" else set())


def test_multi_step_schedule_mixes_far_side_and_boundary(tmp_path: Path) -> None:
    """A far-side step in a recovering incarnation counts that incarnation's requests."""
    case = _one(
        systems.resolve("reference"), "crash@after_claim#1+crash@accepted.payments#2", tmp_path
    )
    assert case.verdict is Status.PASS, case.notes
    kinds = [(w.kind.value, w.boundary, w.hit) for w in case.workers]
    assert kinds == [
        ("crashed_as_planned", "after_claim", 1),
        ("crashed_as_planned", "accepted.payments", 2),
        ("completed", None, None),
    ]


def test_an_unreached_request_is_a_gap_never_a_pass(tmp_path: Path) -> None:
    """The provider accepted fewer than k requests: the step did not land, and says how far
    it got; the case is a gap."""
    case = _one(systems.resolve("reference"), "crash@accepted.payments#99", tmp_path)
    assert case.verdict is not Status.PASS, case.notes
    (record,) = case.step_records
    assert record.landing.value == "not_reached"
    assert "accepted 6 request(s)" in record.detail
    assert "#99 never came" in record.detail
    assert not case.crash_fired


def test_far_side_points_are_validated_against_the_campaign_providers() -> None:
    system = systems.resolve("reference")
    validate_cases(system, [CaseSpec.parse("crash@accepted.payments#1")], ["payments"])
    with pytest.raises(BadInputError, match=r"no provider named 'mail'.*one of payments"):
        validate_cases(system, [CaseSpec.parse("crash@accepted.mail#1")], ["payments"])
    with pytest.raises(BadInputError, match="takes only crash"):
        validate_cases(system, [CaseSpec.parse("pause_past_lease@accepted.payments#1")], [])
    with pytest.raises(BadInputError, match="no provider named 'mail'"):
        run_campaign(
            CampaignSettings(system=system, seed=1, cases=[CaseSpec.parse("crash@accepted.mail#1")])
        )


def test_sweep_plans_one_case_per_accepted_request_of_the_dry_run(tmp_path: Path) -> None:
    """The dry run's accepted effects are the far-side hits: the sweep plans #1..#count."""
    settings = CampaignSettings(
        system=_outbox("outbox_worker"), seed=5, workdir=tmp_path, **_OUTBOX
    )
    with Campaign(settings) as campaign:
        cases, coverage = sweep(campaign, limit=0)
    (dry,) = cases
    count = dry.reached["accepted.payments"]
    assert count == dry.accepted > 0
    far = [c for c in coverage.plan if "accepted." in c]
    assert far == [f"crash@accepted.payments#{k}" for k in range(1, count + 1)]


def test_certify_plans_the_far_side_point_of_each_provider() -> None:
    from harness.engine.case.campaign import default_cases

    plan = [c.id for c in default_cases(systems.resolve("reference"), ["payments", "mail"])]
    assert plan[-2:] == ["crash@accepted.payments#1", "crash@accepted.mail#1"]


#: a worker with no harness in it: standard library only, reading the settings the harness
#: puts in its environment, posting one message and waiting for the answer
_PLAIN_WORKER = """
import json, os, sqlite3, urllib.request
config = json.loads(os.environ["CRASH_HARNESS_WORKER"])
# one of the intended deliveries, read from the intake tables
db = sqlite3.connect(config["db_url"].removeprefix("sqlite:///"))
run_id, destination = db.execute(
    "SELECT r.run_id, d.destination FROM run_requests r JOIN roster d ON d.topic = r.topic"
    " ORDER BY 1, 2"
).fetchone()
request = urllib.request.Request(
    config["provider_url"].rstrip("/") + "/v1/messages",
    data=json.dumps({"destination": destination, "run_id": run_id, "delivery_id": "d1",
                     "body": "hello"}).encode(),
    headers={"Authorization": "Bearer " + os.environ["CRASH_HARNESS_PROVIDER_SECRET"],
             "Idempotency-Key": "plain-d1", "Content-Type": "application/json"},
)
with urllib.request.urlopen(request, timeout=60) as reply:
    print("answered", reply.status, flush=True)
"""


def test_a_worker_without_hooks_is_crashed_at_the_far_side_point(tmp_path: Path) -> None:
    """``--system-cmd`` on a program that imports nothing of the harness: it is killed with
    its request accepted and unanswered, the crash planned and landed."""
    (tmp_path / "plain.py").write_text(_PLAIN_WORKER)
    assert "harness" not in _PLAIN_WORKER
    _, said, report = run_harness(
        tmp_path,
        tmp_path,
        *("certify", "--system-cmd", "python plain.py", "--seed", "4"),
        *("--case", "crash@accepted.payments#1"),
        timeout=300,
    )
    (case,) = report["cases"]
    assert [s["landing"] for s in case["landings"]] == ["landed"], said
    first = case["workers"][0]
    assert (first["outcome"], first["boundary"], first["hit"]) == (
        "crashed_as_planned",
        "accepted.payments",
        1,
    ), said


@pytest.mark.parametrize(
    ("system", "case_id", "verdict"),
    [
        ("tests._two_providers:CORRECT", "crash@accepted.pay#1", "pass"),
        ("tests._two_providers:CORRECT", "crash@accepted.hooks#2", "pass"),
        ("tests._two_providers:NAIVE", "crash@accepted.pay#1", "fail"),
    ],
)
def test_named_providers_each_have_their_far_side_point(
    system: str, case_id: str, verdict: str, tmp_path: Path
) -> None:
    """``[provider.NAME]``: the named provider holds, the other answers; a worker that keys
    its resend by attempt duplicates at the first provider when killed at the second."""
    from tests.test_multiprovider import _result

    result = _result(tmp_path, system, [case_id])
    (case,) = result.cases
    assert [r.landing.value for r in case.step_records] == ["landed"], case.notes
    point = case_id.split("@")[1].split("#")[0]
    assert (case.workers[0].kind.value, case.workers[0].boundary) == ("crashed_as_planned", point)
    assert case.verdict.value == verdict, case.notes
    assert {"accepted.pay", "accepted.hooks"} <= set(case.reached)


def test_explore_draws_a_crash_at_a_far_side_point_and_no_other_fault_there() -> None:
    """The dry run's far-side hits are in ``reach``: a crash may be drawn there, at a request
    the dry run saw; a pause, clock jump, roster change or restore never is."""
    from hypothesis import find, settings
    from hypothesis.errors import NoSuchExample

    from harness.engine.search.explore import step_strategy

    reach = {"after_claim": 3, "after_ack": 2, "accepted.payments": 2}
    strategy = step_strategy(("after_claim", "after_ack"), reach)
    quick = settings(database=None, max_examples=2000)
    found = find(strategy, lambda s: s.boundary == "accepted.payments", settings=quick)
    assert (found.fault, found.hit) == ("crash", 1)
    with pytest.raises(NoSuchExample):
        find(
            strategy,
            lambda s: s.boundary == "accepted.payments" and (s.fault != "crash" or s.hit > 2),
            settings=quick,
        )


#: a sender that gives up on the held reply after a short timeout of its own, closes its
#: connection, says so on a FIFO (the test's rendezvous: no sleep) and goes on living
_IMPATIENT_WORKER = """
import http.client, json, os, sys, time
config = json.loads(os.environ["CRASH_HARNESS_WORKER"])
url = config["provider_url"].split("//", 1)[1]
host, _, rest = url.partition("/")
conn = http.client.HTTPConnection(host, timeout=0.3)
body = json.dumps({"destination": "acct_1", "run_id": "plain", "delivery_id": "d1",
                   "body": "hello"})
try:
    conn.request("POST", "/" + rest.rstrip("/") + "/v1/messages", body=body, headers={
        "Authorization": "Bearer " + os.environ["CRASH_HARNESS_PROVIDER_SECRET"],
        "Idempotency-Key": "plain-d1", "Content-Type": "application/json"})
    conn.getresponse()
except TimeoutError:
    conn.close()
    with open(sys.argv[1], "w") as fifo:
        fifo.write("gave up\\n")
    while True:
        time.sleep(60)
"""


def test_a_sender_that_gave_up_before_the_kill_is_not_landed_at_the_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill must find the sender still waiting for the held reply. One whose own timeout
    fired first went on (it might have recorded "unknown", reconciled, resent): killing it
    then is a crash after the point, so the step is not landed and the case is never a pass
    (this toy sender's one message also fails the workload's invariants: that verdict
    stands). The harness's reaction is slowed here until the sender has gone and the provider
    has seen it go (what a loaded machine can do by itself)."""
    (tmp_path / "impatient.py").write_text(_IMPATIENT_WORKER)
    fifo = tmp_path / "gave_up.fifo"
    os.mkfifo(fifo)
    real = _far_side.HoldWatch

    class SlowWatch(real):  # type: ignore[misc, valid-type]
        def __init__(self, provider: ProviderProcess, **kw: Any) -> None:
            on_held = kw.pop("on_held")

            def late(said: dict[str, Any]) -> None:
                wait_ready(fifo, 120)  # the sender's "gave up", written once it closed
                with AdminClient(provider.url, provider.admin_token) as admin:
                    for _ in range(2400):  # the provider's thread notes the close on its own
                        if admin.wait_held(kw["epoch"], timeout_s=0).get("sender_gone_at"):
                            break
                        select.select([], [], [], 0.05)
                    else:
                        pytest.fail("the provider never saw the sender go")
                on_held(said)

            super().__init__(provider, on_held=late, **kw)

    monkeypatch.setattr(_far_side, "HoldWatch", SlowWatch)
    system = resolve(f"cmd:python {tmp_path / 'impatient.py'} {fifo}")
    case = _one(system, "crash@accepted.payments#1", tmp_path, provider_faults=())
    (record,) = case.step_records
    assert record.landing.value == "unconfirmed", (record, case.notes)
    assert "stopped waiting for the held reply" in record.detail
    assert case.verdict is not Status.PASS, case.notes


def test_the_far_side_worker_starts_while_no_watch_thread_is_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hold is armed before the worker starts and watched after: the worker is started
    with no other thread alive, so it can be born in its cgroup (``_born``: a fork with a
    second thread alive falls back to fork-and-move); the kill still lands at the point."""
    from harness.engine.process.supervisor import Supervisor

    threads_at_start: list[int] = []
    real_start = Supervisor.start

    def start(self: Supervisor, *args: Any, **kwargs: Any) -> Any:
        threads_at_start.append(threading.active_count())
        return real_start(self, *args, **kwargs)

    monkeypatch.setattr(Supervisor, "start", start)
    case = _one(systems.resolve("reference"), "crash@accepted.payments#1", tmp_path)
    assert [r.landing.value for r in case.step_records] == ["landed"]
    assert case.verdict is Status.PASS, case.notes
    assert threads_at_start, "no worker started"
    assert set(threads_at_start) == {1}, threads_at_start
