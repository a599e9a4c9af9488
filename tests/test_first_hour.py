"""A new user's first hour, from a built wheel in a clean venv.

Done when: install, every command once, a user worker outside the repo found by the CLI and
by pytest, and each printed replay reproducing the case it was printed for.

Why this test and not the unit tests: everything here runs the *installed* copy from a folder
outside the repo, so a module or data file left out of the wheel, an import that only works
from the checkout, an exit status that drifted from the README's table, a traceback where a
one-line message was promised, or a ``replay:`` line that runs something other than the case
it names, fails here the way it would fail a user.

The expensive part (wheel, venv, one run of every command) happens once, in the module-scoped
``hour`` fixture; the tests read what it recorded. Independent commands run two at a time
(``ThreadPoolExecutor``; each is a real subprocess); printed replays run one at a time, in the
user's folder, because each writes the default ``reports/`` there.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._fresh_venv import ROOT, FreshVenv

EXAMPLE = ROOT / "examples" / "outbox"

#: 50-85 s on two shared cores once the venv is built (20-35 s more to build it), measured:
#: over the minute a plain run may take, so `--run-slow` (test_examples' venv test shares the
#: session's venv, so a slow run pays for the wheel once)
pytestmark = pytest.mark.slow

#: the README's exit-status table
OK, VIOLATION, BAD_INPUT, INCONCLUSIVE = 0, 1, 2, 3


def _worker(name: str) -> str:
    """The naive outbox worker of docs/own-worker.md, named ``name``: the example file itself,
    so this test follows it, with the one line a user changes when copying it."""
    source = (EXAMPLE / "outbox_worker.py").read_text()
    given = 'name="outbox_worker:SYSTEM"'
    assert given in source, "the example's simple_system(...) line changed; update this test"
    # only the installed package's public API: the worker must not reach into the checkout
    imports = {line for line in source.splitlines() if line.startswith(("from harness", "import "))}
    public = {"from harness import boundary, jobs, simple_system", "import requests"}
    assert imports <= public, imports
    return source.replace(given, f'name="{name}"')


_USER_TESTS = '''\
"""The user's own suite: the marker, three ways a user would write it."""

import pytest


@pytest.mark.crash_sweep("outbox.toml")
def test_outbox_scenario():
    """The scenario file, as docs/own-worker.md shows it."""


@pytest.mark.crash_sweep("outbox.toml", runs=1, destinations_per_topic=3)
def test_outbox_small_workload():
    """The same, on a smaller workload given by the marker's keywords."""


@pytest.mark.crash_sweep(
    "mypkg.crash:SYSTEM",
    provider_window_s=0,
    provider_faults=(),
    worker_overrides={"max_attempts": 1},
)
def test_outbox_system():
    """The system by name, the scenario's settings as keywords."""
'''

_USER_TEST_NAMES = ("test_outbox_scenario", "test_outbox_small_workload", "test_outbox_system")


@dataclass
class Ran:
    """One command as the user ran it: what it said and how it ended."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def said(self) -> str:
        return self.stdout + self.stderr

    def why(self) -> str:
        """For an assertion message: the command and everything it printed."""
        return f"$ {shlex.join(self.argv)}  (exit {self.returncode})\n{self.said}"


@dataclass
class Hour:
    """What the first hour produced: the venv, the user's folder, each command's run."""

    venv: FreshVenv
    user: Path
    env: dict[str, str]
    ran: dict[str, Ran] = field(default_factory=dict)
    #: what the scratch dir held after ``clean --kept``
    leftovers: list[str] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, timeout: float = 300) -> Ran:
        """Run ``argv`` in the user's folder with the venv's environment."""
        started = time.monotonic()
        proc = subprocess.run(
            list(argv),
            cwd=self.user,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Ran(
            list(argv), proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started
        )

    def ch(self, *args: str) -> list[str]:
        """A ``crash-harness`` command line, by the venv's script."""
        return [str(self.venv.bin("crash-harness")), *args]

    def run_all(self, commands: Mapping[str, Sequence[str]]) -> None:
        """Run independent commands two at a time (the CI runners have two cores)."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = dict(zip(commands, pool.map(self.run, commands.values()), strict=True))
        self.ran.update(done)


def _kept_workdir(ran: Ran) -> Path:
    """The ``work dir kept: PATH`` a ``--keep-workdir`` run prints."""
    found = re.search(r"^work dir kept: (\S+)$", ran.stdout, re.M)
    assert found, ran.why()
    return Path(found.group(1))


def _first_delivery(ran: Ran) -> str:
    """A delivery id from ``ledger status --json``; a made-up one if it printed none (the
    status test then says why)."""
    try:
        return str(json.loads(ran.stdout)["deliveries"][0]["delivery_id"])
    except (ValueError, KeyError, IndexError):
        return "dlv_not_listed"


@pytest.fixture(scope="module")
def hour(fresh_venv: FreshVenv, tmp_path_factory: pytest.TempPathFactory) -> Hour:
    """Write the user's package, scenario and tests outside the repo, then run every command
    once from the installed venv; the tests below read what happened."""
    started = time.monotonic()
    user = tmp_path_factory.mktemp("user-project")
    assert not user.resolve().is_relative_to(ROOT)
    (user / "mypkg").mkdir()
    (user / "mypkg" / "__init__.py").write_text("")
    (user / "mypkg" / "crash.py").write_text(_worker("mypkg.crash:SYSTEM"))
    # the same worker under a name that is not its import path (simple_system allows it)
    (user / "mypkg" / "named.py").write_text(_worker("naive-outbox"))
    scenario = (EXAMPLE / "outbox.toml").read_text()
    assert 'system = "outbox_worker:SYSTEM"' in scenario
    (user / "outbox.toml").write_text(
        scenario.replace("outbox_worker:SYSTEM", "mypkg.crash:SYSTEM")
    )
    (user / "test_outbox.py").write_text(_USER_TESTS)
    scratch = user / ".scratch"  # work dirs: not the shared /dev/shm other tests prune
    scratch.mkdir()
    # every run's kept work dir stays until `clean --kept` (the default keeps the newest 5,
    # and the ledger read below is in the reference's)
    env = fresh_venv.env(
        NO_COLOR="1", CRASH_HARNESS_TMPDIR=str(scratch), CRASH_HARNESS_KEEP_WORKDIRS="100"
    )
    h = Hour(fresh_venv, user, env)
    ch = h.ch
    h.run_all(
        {
            "--version": ch("--version"),
            "--help": ch("--help"),
            "boundaries": ch("boundaries"),
            "scenarios list": ch("scenarios", "list"),
            "scenarios check": ch("scenarios", "check", "outbox.toml"),
            "providers list": ch("providers", "list"),
            "completion bash": ch("completion", "bash"),
            "certify": ch(
                *("certify", "--seed", "1", "--case", "baseline"),
                *("--case", "crash@after_provider_accept#1"),
                *("--report-dir", "r-certify", "--keep-workdir"),
            ),
            "certify --system": ch(
                *("certify", "--system", "mypkg.crash:SYSTEM", "--seed", "1"),
                *("--report-dir", "r-certify-user"),
            ),
            "certify --system named": ch(
                *("certify", "--system", "mypkg.named:SYSTEM", "--seed", "1"),
                *("--case", "baseline", "--report-dir", "r-certify-named"),
            ),
            "sweep": ch("sweep", "outbox.toml", "--report-dir", "r-sweep"),
            "run --shard 1/2": ch(
                "run", "outbox.toml", "--seed", "5", "--shard", "1/2", "--report-dir", "r-run1"
            ),
            "run --shard 2/2": ch(
                "run", "outbox.toml", "--seed", "5", "--shard", "2/2", "--report-dir", "r-run2"
            ),
            "explore": ch(
                *("explore", "outbox.toml", "--budget", "3"),
                *("--report-dir", "r-explore", "--examples-dir", "hypothesis-db"),
            ),
            "mutants": ch(
                *("mutants", "--only", "new_key_per_attempt", "--case", "baseline"),
                *("--seed", "1", "--plain"),
            ),
            "pytest": [
                *(str(fresh_venv.bin("python")), "-m", "pytest", "-q", "-p", "no:cacheprovider"),
                *("--basetemp", str(user / ".pytest-tmp"), "--crash-report-dir", "r-pytest"),
            ],
        }
    )
    ledger = f"sqlite:///{_kept_workdir(h.ran['certify']) / 'baseline' / 'baseline.sqlite'}"
    h.run_all(
        {
            "report": ch("report", "r-sweep/report.json", "--report-dir", "r-rendered"),
            "report merge": ch(
                "report", "merge", "r-run1/report.json", "r-run2/report.json", "--out", "m.json"
            ),
            "ledger status": ch("ledger", "status", "--db", ledger, "--all", "--json"),
        }
    )
    delivered = _first_delivery(h.ran["ledger status"])
    resolve = ch("ledger", "resolve", delivered, "--as", "failed", "--note", "x", "--db", ledger)
    h.ran["ledger resolve"] = h.run(resolve)
    h.ran["clean"] = h.run(ch("clean"))
    h.ran["clean --kept"] = h.run(ch("clean", "--kept"))
    h.leftovers = sorted(p.name for p in scratch.iterdir())
    took = time.monotonic() - started
    print(
        f"first hour: wheel {fresh_venv.build_s:.1f}s, install {fresh_venv.install_s:.1f}s, "
        f"venv {fresh_venv.size_bytes / 1e6:.0f} MB; commands {took:.1f}s"
    )
    for name, ran in h.ran.items():
        print(f"  exit {ran.returncode}  {ran.seconds:5.1f}s  {name}")
    return h


#: every command the fixture ran, and the status the README's table says it must end with
EXPECTED_STATUS = {
    "--version": OK,
    "--help": OK,
    "boundaries": OK,
    "scenarios list": OK,
    "scenarios check": OK,
    "providers list": OK,
    "completion bash": OK,
    "certify": OK,  # the reference passes; a --case subset owes no full coverage
    "certify --system": INCONCLUSIVE,  # the naive worker dies on the dropped reply
    "certify --system named": INCONCLUSIVE,
    "sweep": VIOLATION,
    "run --shard 1/2": VIOLATION,
    "run --shard 2/2": VIOLATION,
    "explore": VIOLATION,
    "mutants": OK,  # every mutant run was caught
    "pytest": int(pytest.ExitCode.TESTS_FAILED),
    "report": OK,
    "report merge": VIOLATION,  # the merged report holds the violations
    "ledger status": OK,
    "ledger resolve": BAD_INPUT,  # a delivered item is not the operator's to settle
    "clean": OK,
    "clean --kept": OK,
}


@pytest.mark.parametrize("name", sorted(EXPECTED_STATUS))
def test_command_exits_as_documented_without_a_traceback(hour: Hour, name: str) -> None:
    """Every command ends with its documented status and says what it says in lines, not in
    a Python traceback (a traceback is the harness failing, whatever the status)."""
    ran = hour.ran[name]
    assert ran.returncode == EXPECTED_STATUS[name], ran.why()
    assert "Traceback" not in ran.said, ran.why()
    assert "internal error" not in ran.said, ran.why()


def test_every_command_was_run(hour: Hour) -> None:
    """A command added to the CLI without a place in the first hour fails here: the list in
    ``--help`` is the list of what a user will try."""
    listed = re.findall(
        r"^  ([a-z][a-z-]*)  ", hour.ran["--help"].stdout.split("Commands:")[1], re.M
    )
    assert len(listed) >= 13, hour.ran["--help"].stdout
    ran = {r.argv[1] for r in hour.ran.values() if r.argv[0].endswith("/crash-harness")}
    # `replay` runs as the user runs it: the line the sweep printed, in the replay tests below
    ran.add(shlex.split(_replay_lines(hour.ran["sweep"].stdout)[0])[1])
    assert sorted(set(listed) - ran) == [], ran


def test_the_installed_copy_ran_not_the_checkout(hour: Hour) -> None:
    """The user's folder has nothing of the repo on its path: ``harness`` is the venv's, the
    printed ``crash-harness`` resolves to the venv's script, and ``mypkg`` is the user's."""
    probe = hour.run(
        [
            str(hour.venv.bin("python")),
            "-c",
            "import harness, mypkg.crash; print(harness.__file__); print(mypkg.crash.__file__)",
        ]
    )
    assert probe.returncode == 0, probe.why()
    harness_file, user_file = (Path(p).resolve() for p in probe.stdout.split())
    assert harness_file.is_relative_to(hour.venv.root.resolve()), harness_file
    assert not harness_file.is_relative_to(ROOT), harness_file
    assert user_file == (hour.user / "mypkg" / "crash.py").resolve()
    assert shutil.which("crash-harness", path=hour.env["PATH"]) == str(
        hour.venv.bin("crash-harness")
    )
    version = hour.ran["--version"].stdout.strip()
    assert re.fullmatch(r"crash-harness, version \d+\.\d+\.\d+\S*", version), version
    assert hour.venv.wheel.name.startswith(f"crash_harness-{version.rsplit(' ', 1)[1]}-")


def test_certify_finds_the_user_worker_and_names_its_death_in_one_line(hour: Hour) -> None:
    """``certify --system mypkg.crash:SYSTEM`` imports the user's module from the folder it
    runs in, and the naive worker's death on the dropped reply is one line, as
    docs/own-worker.md shows it, with the user's own file and line."""
    out = hour.ran["certify --system"].stdout
    crash_py = hour.user.resolve() / "mypkg" / "crash.py"
    died = re.search(
        r"^       note: worker w1 raised requests\.exceptions\.ConnectionError at (\S+):\d+ in "
        r"main: .*; it did not survive a dropped reply to \S+ \(a fault the provider injected\)$",
        out,
        re.M,
    )
    assert died, out
    assert Path(died.group(1)).resolve() == crash_py
    assert "  ???  baseline " in out
    assert "Traceback" not in hour.ran["certify --system"].said


def test_sweep_finds_the_outbox_duplicate(hour: Hour) -> None:
    """Dedupe off, faults off: every crash after the post sends twice."""
    out = hour.ran["sweep"].stdout
    assert re.search(r"^invariants violated: .*exactly_once_effect", out, re.M), out
    assert "sweep coverage: 6/6 (boundary, hit) pairs" in out, out
    fails = re.findall(r"^  FAIL crash@after_provider_accept#\d", out, re.M)
    assert len(fails) == 6, out


def test_sweep_names_only_the_invariant_the_bug_breaks(hour: Hour) -> None:
    """docs/own-worker.md and the README promise ``broken: exactly_once_effect`` alone."""
    report = json.loads((hour.user / "r-sweep" / "report.json").read_text())
    assert _failed_anywhere(report) == {"exactly_once_effect"}


def test_reports_render_merge_and_clean_up(hour: Hour) -> None:
    """``report`` writes the three renderings it names, ``merge`` puts the shards back into
    the sweep's seven cases, ``clean --kept`` leaves no work dir behind."""
    rendered = hour.ran["report"].stdout
    for ext in ("html", "md", "xml"):
        assert (hour.user / "r-rendered" / f"report.{ext}").is_file(), rendered
    merged = json.loads((hour.user / "m.json").read_text())
    assert sorted(c["id"] for c in merged["cases"]) == sorted(
        ["baseline", *(f"crash@after_provider_accept#{i}" for i in range(1, 7))]
    )
    assert "exactly_once_effect" in _failed_anywhere(merged)
    assert "removed " in hour.ran["clean --kept"].stdout
    assert hour.leftovers == [], hour.leftovers


def test_mutants_and_ledger_say_what_they_found(hour: Hour) -> None:
    """The mutant is caught by its intended invariant; the ledger lists the reference's six
    deliveries; resolving a delivered one is refused in one line."""
    assert "mutation score: 1/1 caught" in hour.ran["mutants"].stdout, hour.ran["mutants"].why()
    status = json.loads(hour.ran["ledger status"].stdout)
    assert status["states"]["delivered"]["count"] == status["total"] > 0
    refusal = hour.ran["ledger resolve"].stderr.strip()
    assert refusal.startswith("error: delivery "), refusal
    assert "\n" not in refusal, refusal


# -- replays --------------------------------------------------------------------------------


def _failed_anywhere(report: Mapping[str, Any]) -> set[str]:
    return {
        name
        for case in report["cases"]
        for name, check in case["invariants"].items()
        if check["status"] == "fail"
    }


def _outcome(case: Mapping[str, Any]) -> dict[str, Any]:
    """What a replay must reproduce: the verdict, each invariant's status (failed or not
    judged alike) and what the provider received."""
    return {
        "id": case["id"],
        "verdict": case["verdict"],
        "invariants": {n: c["status"] for n, c in case["invariants"].items()},
        "effects": case["effects"],
    }


def _replay_lines(text: str) -> list[str]:
    return re.findall(r"^\s*replay: (.+)$", text, re.M)


def _pytest_section(out: str, test: str) -> str:
    """The failure text pytest printed for one of the user's tests."""
    found = re.search(rf"^_+ {test} _+$(.*?)(?=^_+ test_|^=+ short test summary)", out, re.M | re.S)
    assert found, out
    return found.group(1)


@dataclass(frozen=True)
class Printed:
    """A ``replay:`` line a command printed for a failing case, and that case's report."""

    line: str
    original: dict[str, Any]


def _printed(hour: Hour, source: str) -> Printed:
    """The first replay line ``source`` printed, with the case it was printed for read back
    from the report that run wrote."""
    if source.startswith("pytest "):
        test = source.split()[1]
        line = _replay_lines(_pytest_section(hour.ran["pytest"].stdout, test))[0]
        (report_file,) = (hour.user / "r-pytest").glob(f"*{test}*/report.json")
    else:
        # explore: the replay of the smallest failing schedule, printed last
        line = _replay_lines(hour.ran[source].stdout)[-1 if source == "explore" else 0]
        report_file = hour.user / _REPORT_DIRS[source] / "report.json"
    report = json.loads(report_file.read_text())
    (case,) = [c for c in report["cases"] if c["replay"] == line][:1] or [None]
    assert case is not None, (line, [c["replay"] for c in report["cases"]])
    return Printed(line, _outcome(case))


#: where each command of the fixture wrote its report
_REPORT_DIRS = {
    "sweep": "r-sweep",
    "explore": "r-explore",
    "certify --system": "r-certify-user",
    "certify --system named": "r-certify-named",
}

#: the exit status a lone replayed case ends with, by its verdict
_STATUS_OF_VERDICT = {"fail": VIOLATION, "unknown": INCONCLUSIVE}

REPLAYS = [
    pytest.param("sweep", id="sweep"),
    pytest.param("explore", id="explore"),
    pytest.param("certify --system", id="certify-system"),
    pytest.param("pytest test_outbox_scenario", id="pytest-scenario"),
    pytest.param(
        "certify --system named",
        id="certify-system-not-module-attr",
    ),
    pytest.param(
        "pytest test_outbox_small_workload",
        id="pytest-marker-keywords",
    ),
    pytest.param(
        "pytest test_outbox_system",
        id="pytest-system-keywords",
    ),
]


@pytest.mark.parametrize("source", REPLAYS)
def test_printed_replay_reproduces_the_case(hour: Hour, source: str) -> None:
    """The printed line, run verbatim in the same folder, gives the same case: same verdict,
    same invariant statuses, same provider effects."""
    printed = _printed(hour, source)
    argv = shlex.split(printed.line)
    assert argv[0] == "crash-harness", printed.line
    shutil.rmtree(hour.user / "reports", ignore_errors=True)  # no report of an earlier replay
    replayed = hour.run(argv)
    assert "Traceback" not in replayed.said, replayed.why()
    assert replayed.returncode == _STATUS_OF_VERDICT[printed.original["verdict"]], replayed.why()
    report = json.loads((hour.user / "reports" / "report.json").read_text())
    (case,) = report["cases"]
    assert _outcome(case) == printed.original, f"{printed.line}\n{replayed.why()}"
    assert case["replay"] == printed.line  # and it says so itself
