"""`crash-harness report merge`: shard reports of one campaign become the unsharded report,
and shards that do not belong together, overlap or are missing are refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from harness.cli import main
from harness.reports import validate

ROOT = Path(__file__).resolve().parent.parent
#: five cases: shard 1/2 runs the 1st, 3rd and 5th, shard 2/2 the 2nd and 4th
SCENARIO = "fault-provider-faults"
FIXTURE = Path(__file__).parent / "fixtures" / "report_failing.json"


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenario run whole and as shards 1/2 and 2/2 (at once: each has its own provider)."""
    where = tmp_path_factory.mktemp("shards")
    procs = {
        "full": _start("run", SCENARIO, "--report-dir", "full", "--determinism", "0", cwd=where),
        **{
            f"s{i}": _start(
                "run",
                SCENARIO,
                *("--shard", f"{i}/2", "--report-dir", f"s{i}", "--determinism", "1"),
                cwd=where,
            )
            for i in (1, 2)
        },
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}: {out}\n{err}"
    return where


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _merge(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["report", "merge", *(str(a) for a in args)])


def _ids(report: dict[str, Any]) -> list[str]:
    return [c["id"] for c in report["cases"]]


def _copy(src: Path, dst: Path, **changes: Any) -> Path:
    data = _load(src)
    data.update(changes)
    dst.write_text(json.dumps(data))
    return dst


def test_shard_reports_record_their_shard_and_the_whole_plan(runs: Path) -> None:
    """Each shard report says which i/n it is and lists the unsharded plan in order."""
    full = _load(runs / "full" / "report.json")
    assert "shard" not in full
    for i in (1, 2):
        shard = _load(runs / f"s{i}" / "report.json")
        validate(shard)
        assert shard["shard"] == {"spec": f"{i}/2", "index": i, "count": 2, "plan": _ids(full)}
        assert _ids(shard) == _ids(full)[i - 1 :: 2]


def test_merged_shards_are_the_unsharded_report(runs: Path, tmp_path: Path) -> None:
    """Merged (in any order), the shards give the unsharded plan order, summary and verdict."""
    out = tmp_path / "merged.json"
    result = _merge(runs / "s2" / "report.json", runs / "s1" / "report.json", "--out", out)
    assert result.exit_code == 0, result.output
    assert "merged 2 of 2 shard(s): 5 case(s), 5 passed" in result.output
    merged, full = _load(out), _load(runs / "full" / "report.json")
    validate(merged)
    assert _ids(merged) == _ids(full) == merged["plan"]["cases"]
    assert _ids(merged) != _ids(_load(runs / "s1" / "report.json")) + _ids(
        _load(runs / "s2" / "report.json")
    )
    assert merged["summary"] == full["summary"]
    assert [(e["boundary"], e["covered"], e["cases"]) for e in merged["coverage"]] == [
        (e["boundary"], e["covered"], e["cases"]) for e in full["coverage"]
    ]
    assert merged["scenario"]["outcome"] == full["scenario"]["outcome"]
    assert merged["replay"] == full["replay"]
    assert merged["partial"] is False
    assert "shard" not in merged
    assert [s["shard"] for s in merged["merged"]["shards"]] == ["1/2", "2/2"]
    assert merged["merged"]["missing"] == []
    assert len(merged["determinism"]) == 2  # each shard's sample, kept
    # the merged report renders like any other, through the old `report REPORT.json` form
    md = CliRunner().invoke(main, ["report", str(out), "--format", "md"])
    assert md.exit_code == 0, md.output
    assert "all 5 case(s) hold every invariant" in md.output


def test_a_shard_given_twice_is_refused(runs: Path, tmp_path: Path) -> None:
    """The same shard twice (a copy, or the same path) names the file and the repeated case."""
    s1, s2 = runs / "s1" / "report.json", runs / "s2" / "report.json"
    again = _copy(s1, tmp_path / "again.json")
    result = _merge(s1, s2, again, "--out", tmp_path / "m.json")
    assert result.exit_code == 2, result.output
    assert f"{again}: field 'cases': case id 'provider_accept_then_drop:1'" in result.output
    assert f"also in {s1}" in result.output
    same = _merge(s1, s1, s2, "--out", tmp_path / "m.json")
    assert same.exit_code == 2
    assert "the same file given twice" in same.output
    assert not (tmp_path / "m.json").exists()


def test_shards_of_another_seed_are_refused(runs: Path, tmp_path: Path) -> None:
    """A shard run with a different seed is not of this campaign: the file and field are named."""
    other = _copy(runs / "s2" / "report.json", tmp_path / "seed2.json", seed=2)
    result = _merge(runs / "s1" / "report.json", other, "--out", tmp_path / "m.json")
    assert result.exit_code == 2, result.output
    assert f"{other}: field 'seed' is 2 but {runs / 's1' / 'report.json'} has 1" in result.output


def test_a_missing_shard_is_named(runs: Path, tmp_path: Path) -> None:
    """Without --allow-partial, an incomplete set of shards is refused, naming what is missing."""
    result = _merge(runs / "s2" / "report.json", "--out", tmp_path / "m.json")
    assert result.exit_code == 2, result.output
    assert "shard(s) 1/2 missing" in result.output
    assert not (tmp_path / "m.json").exists()


def test_allow_partial_merges_but_never_passes(runs: Path, tmp_path: Path) -> None:
    """--allow-partial writes the report, names the missing shard, and exits inconclusive."""
    out = tmp_path / "m.json"
    result = _merge(runs / "s1" / "report.json", "--allow-partial", "--out", out)
    assert result.exit_code == 3, result.output
    assert "missing shard(s): 2/2" in result.output
    merged = _load(out)
    validate(merged)
    assert merged["merged"]["missing"] == ["2/2"]
    assert merged["partial"] is True
    assert merged["summary"]["not_run"] == 2
    assert "2/2 missing" in merged["scenario"]["outcome"]
    assert "not a pass" in merged["scenario"]["outcome"]


def test_merged_exit_status_follows_the_merged_cases(runs: Path, tmp_path: Path) -> None:
    """A violation in one shard makes the merged report a violation (exit 1), as `run` would."""
    broken = _load(runs / "s2" / "report.json")
    case = broken["cases"][0]
    case["verdict"] = "fail"
    case["invariants"]["exactly_once_effect"]["status"] = "fail"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    out = tmp_path / "m.json"
    result = _merge(runs / "s1" / "report.json", path, "--out", out)
    assert result.exit_code == 1, result.output
    merged = _load(out)
    assert merged["summary"]["failed"] == 1
    assert merged["summary"]["invariants_violated"] == ["exactly_once_effect"]
    assert "exactly_once_effect" in merged["scenario"]["outcome"]


def test_a_report_that_is_not_a_shard_is_refused(runs: Path, tmp_path: Path) -> None:
    """An unsharded report (or one from before shards were recorded) names the missing field."""
    result = _merge(FIXTURE, runs / "s1" / "report.json", "--out", tmp_path / "m.json")
    assert result.exit_code == 2, result.output
    assert f"{FIXTURE}: field 'shard' is missing" in result.output


def _sweep_whole_and_in_two(where: Path, scenario: str, *whole: str) -> None:
    """``sweep SCENARIO`` into full/, and as shards 1/2 and 2/2 into s1/ and s2/, at once
    (each has its own provider); every one must exit 0."""
    procs = {
        "full": _start("sweep", scenario, "--report-dir", "full", *whole, cwd=where),
        **{
            f"s{i}": _start(
                "sweep",
                scenario,
                *("--shard", f"{i}/2", "--report-dir", f"s{i}", "--determinism", "0"),
                cwd=where,
            )
            for i in (1, 2)
        },
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}: {out}\n{err}"


def test_a_sharded_sweep_merges_into_the_unsharded_sweep(tmp_path: Path) -> None:
    """Each shard dry-runs to plan, keeps its slice, and counts its own pairs; the merge has
    the unsharded sweep's cases in order and its coverage (a missing shard's pairs missing)."""
    _sweep_whole_and_in_two(tmp_path, "reference-sweep")
    full = _load(tmp_path / "full" / "report.json")
    shard2 = _load(tmp_path / "s2" / "report.json")
    assert shard2["shard"]["plan"] == _ids(full)
    assert _ids(shard2) == _ids(full)[1::2]
    assert shard2["sweep"]["pairs_expected"] < full["sweep"]["pairs_expected"]
    out = tmp_path / "merged.json"
    result = _merge(tmp_path / "s2" / "report.json", tmp_path / "s1" / "report.json", "--out", out)
    assert result.exit_code == 0, result.output
    merged = _load(out)
    assert _ids(merged) == _ids(full)
    assert merged["sweep"] == full["sweep"]
    assert merged["sweep"]["pairs_covered"] == merged["sweep"]["pairs_expected"] > 0
    partial = tmp_path / "partial.json"
    result = _merge(tmp_path / "s2" / "report.json", "--allow-partial", "--out", partial)
    half = _load(partial)["sweep"]
    assert half["pairs_expected"] == full["sweep"]["pairs_expected"]
    assert half["pairs_covered"] == shard2["sweep"]["pairs_covered"]
    assert len(half["pairs_missing"]) == half["pairs_expected"] - half["pairs_covered"]


#: a daemon with two boundaries and one delivery: a depth-2 sweep of 7 cases (the dry run,
#: 2 first crashes, 2 second crashes planned from each)
DEPTH_TWO = """
[scenario]
name = "daemon-depth-two"
system = "cmd:python -m tests._daemon correct"
boundaries = ["job_started", "after_provider_accept"]
prepare = "tests._daemon:prepare"
seed = 3

[workload]
runs = 1
destinations_per_topic = 1

[provider]
faults = []

[worker]
daemon = true

[cases]
mode = "sweep"
depth = 2

[settle]
probe = "tests._daemon:pending"
deadline_s = 10
interval_s = 0.2
quiet_s = 1
"""


@pytest.mark.slow  # 30 s on a 2-core runner; the depth-1 sweep and four shards merge in CI
def test_a_depth_two_sweep_sharded_merges_into_the_unsharded_one(tmp_path: Path) -> None:
    """Each shard plans its second crashes from its own first ones; merged, the shards are
    the unsharded depth-2 sweep: the same cases in the same order, the same coverage."""
    (tmp_path / "d2.toml").write_text(DEPTH_TWO)
    _sweep_whole_and_in_two(tmp_path, "d2.toml", "--determinism", "0")
    full = _load(tmp_path / "full" / "report.json")
    seconds = [i for i in _ids(full) if "+" in i]
    # two first crashes at boundaries and one at the far side (accepted.payments#1), each
    # followed by a second crash at each boundary its recovery reached
    assert len(seconds) == 6, _ids(full)
    shards = [_load(tmp_path / f"s{i}" / "report.json") for i in (1, 2)]
    # every second crash ran in the shard of its first crash, and only there
    for shard in shards:
        firsts = {i for i in _ids(shard) if "+" not in i}
        assert all(i.split("+")[0] in firsts for i in _ids(shard) if "+" in i), _ids(shard)
    out = tmp_path / "merged.json"
    result = _merge(tmp_path / "s2" / "report.json", tmp_path / "s1" / "report.json", "--out", out)
    assert result.exit_code == 0, result.output
    merged = _load(out)
    validate(merged)
    assert _ids(merged) == _ids(full) == merged["plan"]["cases"]
    assert merged["sweep"] == full["sweep"]
    assert merged["sweep"]["depth2_planned"] == merged["sweep"]["depth2_fired"] == 6
    assert merged["summary"] == full["summary"]
    assert [c["verdict"] for c in merged["cases"]] == [c["verdict"] for c in full["cases"]]


#: every variable ``--shard auto`` reads (the CI running this test may set some)
_ENGINE_VARS = (
    "CRASH_HARNESS_SHARD",
    "CRASH_HARNESS_SHARD_COUNT",
    "CI_NODE_INDEX",
    "CI_NODE_TOTAL",
    "CIRCLE_NODE_INDEX",
    "CIRCLE_NODE_TOTAL",
    "BUILDKITE_PARALLEL_JOB",
    "BUILDKITE_PARALLEL_JOB_COUNT",
    "JOB_COMPLETION_INDEX",
)


def test_four_shards_told_by_their_ci_engines_merge_into_the_one_machine_report(
    runs: Path, tmp_path: Path
) -> None:
    """Four jobs, each told its place by a different engine's variables (``--shard auto``),
    run the five cases between them; merged, they are the unsharded run's report."""
    told = {
        1: {"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "4"},  # GitLab, from 1
        2: {"CIRCLE_NODE_INDEX": "1", "CIRCLE_NODE_TOTAL": "4"},  # CircleCI, from 0
        3: {"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "4"},
        4: {"JOB_COMPLETION_INDEX": "3", "CRASH_HARNESS_SHARD_COUNT": "4"},  # Kubernetes
    }
    base = {k: v for k, v in os.environ.items() if k not in _ENGINE_VARS}
    procs = {
        i: subprocess.Popen(
            [
                *(sys.executable, "-m", "harness", "run", SCENARIO, "--shard", "auto"),
                *("--report-dir", f"q{i}", "--determinism", "0", "--seed", "1"),
            ],
            cwd=tmp_path,
            env={**base, "PYTHONPATH": str(ROOT), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, env in told.items()
    }
    for i, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"shard {i}: {out}\n{err}"
        assert f"shard {i}/4 (--shard auto: " in out, out
    out = tmp_path / "merged.json"
    result = _merge(*(tmp_path / f"q{i}" / "report.json" for i in (3, 1, 4, 2)), "--out", out)
    assert result.exit_code == 0, result.output
    assert "merged 4 of 4 shard(s): 5 case(s), 5 passed" in result.output
    merged, full = _load(out), _load(runs / "full" / "report.json")
    assert _ids(merged) == _ids(full)
    assert [c["verdict"] for c in merged["cases"]] == [c["verdict"] for c in full["cases"]]
    assert merged["summary"] == full["summary"]
    assert [s["shard"] for s in merged["merged"]["shards"]] == ["1/4", "2/4", "3/4", "4/4"]
