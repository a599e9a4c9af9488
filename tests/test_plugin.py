"""The pytest plugin, driven as a user would: pytest in a subprocess on a scratch project.

Workloads are small (one run, three destinations) so a sweep takes a few seconds, yet the
dry run still reaches every documented boundary of the reference.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

SMALL = "runs=1, destinations_per_topic=3"


def test_loading_the_plugin_imports_no_engine() -> None:
    """Importing the plugin module pulls in neither SQLAlchemy nor the campaign engine."""
    code = (
        "import sys, harness.pytest_plugin\n"
        "heavy = ('sqlalchemy', 'harness.engine.case.campaign', 'fake_providers', 'requests')\n"
        "print('heavy:', [m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "heavy: []"


def test_a_plain_test_run_leaves_the_engine_unloaded(pytester: pytest.Pytester) -> None:
    """With the plugin registered, a suite that uses none of it never imports the engine."""
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            assert "harness.engine.case.campaign" not in sys.modules
            assert "sqlalchemy" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("crash-harness: *campaign*")


def test_help_shows_the_option_group_and_ini_twins(pytester: pytest.Pytester) -> None:
    """One ``crash-harness`` group with four options, each with an ini key and the same help."""
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        [
            "crash-harness (crash-inject delivery workers):",
            "*--crash-seed=SEED*crash-harness workload seed*",
            "*--crash-report-dir=DIR*",
            "*--crash-db=URL*",
            "*--crash-jobs=N*crash-harness: run cases on this many cores (1).",
            "*crash_seed (string):*crash-harness workload seed*",
            "*crash_jobs (string):*crash-harness: run cases on this many cores (1).",
        ]
    )
    markers = pytester.runpytest_subprocess("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.crash_sweep(target, *"])


def test_sweep_marker_passes_on_the_reference(pytester: pytest.Pytester) -> None:
    """A sweep of the reference passes, and the summary counts its cases."""
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.crash_sweep("reference", {SMALL})
        def test_reference_survives_every_crash():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["crash-harness: 1 campaign(s), * case(s), 0 failed; all * invariant(s) judged"]
    )


def test_sweep_marker_fails_on_a_mutant_with_invariant_and_replay(
    pytester: pytest.Pytester,
) -> None:
    """A mutant's sweep fails: invariant, summary, evidence and replay, and no traceback."""
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.crash_sweep("mutant:transcript_rebuild", {SMALL})
        def test_mutant():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--crash-seed", "4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "crash-harness: sweep of mutant:transcript_rebuild (system mutant:transcript_rebuild,"
            " seed 4, sqlite): * case(s) failed",
            "broken: *no_restart_duplicates (in * cases)*",
            "FAIL crash@*",
            "  no_restart_duplicates (failed): a restarted worker created a second delivery item*",
            "    fix: create delivery rows in the transaction that commits the run*"
            "(docs/invariants.md#no_restart_duplicates)",
            "    evidence: {*",
            # the marker's runs=/destinations_per_topic= travel with the case
            "  replay: crash-harness certify --system mutant:transcript_rebuild --set *"
            " --seed 4 --case *",
        ]
    )
    result.stdout.no_fnmatch_line("*pytest_plugin.py*")
    result.stdout.no_fnmatch_line("*Traceback*")


def test_sweep_marker_takes_a_scenario_file_or_a_system_object(pytester: pytest.Pytester) -> None:
    """A scenario path beside the test, and a System object, both with an expected violation."""
    pytester.makefile(
        ".toml",
        mutant="""
        [scenario]
        system = "mutant:transcript_rebuild"
        seed = 2
        [workload]
        runs = 1
        destinations_per_topic = 3
        [expect]
        violation = "no_restart_duplicates"
        """,
    )
    pytester.makepyfile(
        f"""
        import pytest
        from harness.systems import resolve

        @pytest.mark.crash_sweep("mutant.toml")
        def test_scenario_expects_its_violation():
            pass

        @pytest.mark.crash_sweep(
            resolve("mutant:transcript_rebuild"), expect_violation="liveness", {SMALL}
        )
        def test_wrong_expectation_fails():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--crash-jobs", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*expected violation liveness was NOT found in * case(s)"])


def test_seed_precedence_cli_then_keyword_then_ini(pytester: pytest.Pytester) -> None:
    """``--crash-seed`` beats a call's ``seed=``, which beats ``crash_seed`` in the ini file."""
    pytester.makeini(
        """
        [pytest]
        crash_seed = 5
        crash_jobs = 2
        """
    )
    pytester.makepyfile(
        """
        def _seed(crash_campaign, **kw):
            result = crash_campaign(
                "reference", cases=["baseline"], runs=1, destinations_per_topic=1, **kw
            )
            print(f"SEED={result.settings.seed} JOBS={result.settings.jobs}")

        def test_ini(crash_campaign):
            _seed(crash_campaign)

        def test_keyword(crash_campaign):
            _seed(crash_campaign, seed=3)
        """
    )
    from_ini = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "-v")
    from_ini.assert_outcomes(passed=2)
    from_ini.stdout.fnmatch_lines(["*SEED=5 JOBS=2*", "*SEED=3 JOBS=2*"])
    from_cli = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-s", "-v", "--crash-seed", "7", "--crash-jobs", "1"
    )
    from_cli.assert_outcomes(passed=2)
    from_cli.stdout.fnmatch_lines(["*SEED=7 JOBS=1*", "*SEED=7 JOBS=1*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--crash-jobs", "0"], "*--crash-jobs: expected a number >= 1, got 0*"),
        (["--crash-seed", "x"], "*--crash-seed: expected a whole number, got 'x'*"),
    ],
)
def test_bad_option_values_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    """A bad value stops the run before any test, naming the option."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_fixtures_provider_campaign_and_report(pytester: pytest.Pytester) -> None:
    """The provider serves and is stopped after; a campaign runs; reports land in the dir."""
    pytester.makeini(
        """
        [pytest]
        crash_report_dir = from-ini
        """
    )
    pytester.makepyfile(
        """
        import os
        import requests

        PIDS = []

        def test_provider(crash_provider):
            PIDS.append(crash_provider.pid)
            body = {"destination": "a@x", "run_id": "r1", "delivery_id": "d1",
                    "body": "hi", "recognizer": "ch-0123456789ab"}
            headers = {**crash_provider.auth_headers(), "Idempotency-Key": "k1"}
            reply = requests.post(crash_provider.url + "/v1/messages", json=body,
                                  headers=headers, timeout=5)
            assert reply.status_code in (200, 201)
            assert crash_provider.admin.count(outcome="fresh") == 1

        def test_provider_was_stopped():
            # the fixture stopped and reaped it: signalling the pid now fails
            try:
                os.kill(PIDS[0], 0)
            except ProcessLookupError:
                return
            raise AssertionError("provider still running")

        def test_campaign_and_report(crash_campaign, crash_report):
            result = crash_campaign(
                "reference", cases=["baseline", "crash@after_claim#1"], runs=1,
                destinations_per_topic=1,
            )
            assert [c.verdict.value for c in result.cases] == ["pass", "pass"]
            crash_campaign.check(result, hold=["exactly_once_effect"], coverage=False)
            paths = crash_report(result, "mine")
            assert paths["json"].is_file()
            print("REPORT", paths["json"])
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=3)
    assert (pytester.path / "from-ini" / "mine" / "report.json").is_file()
    assert (pytester.path / "from-ini" / "mine" / "report.html").is_file()
    elsewhere = pytester.path / "from-cli"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--crash-report-dir",
        str(elsewhere),
        "test_fixtures_provider_campaign_and_report.py::test_campaign_and_report",
    )
    result.assert_outcomes(passed=1)
    assert (elsewhere / "mine" / "report.json").is_file()


def test_marker_mistakes_fail_the_test_readably(pytester: pytest.Pytester) -> None:
    """A misspelt setting, a missing scenario or an unknown invariant: a one-line failure."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.crash_sweep("reference", run=1)
        def test_typo():
            pass

        @pytest.mark.crash_sweep("no-such-scenario.toml")
        def test_missing():
            pass

        @pytest.mark.crash_sweep("reference", hold=["exactly_one"], runs=1)
        def test_unknown_invariant():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*crash-harness: unknown setting(s) run; expected some of *runs*",
            "*crash-harness: scenario 'no-such-scenario.toml': no such file*",
            "*crash-harness: unknown invariant 'exactly_one'; known: *",
        ],
        consecutive=False,
    )
    result.stdout.no_fnmatch_line("*Traceback*")
