"""A sweep crashes one hit per class of a discovered point and a seeded sample of the rest
(``harness.engine.search._classes``; issue "Real subjects at CI speed", item 2), says how
many it left out, and never counts those as covered.

tests/_idle_poll_worker.py commits through one line fifteen times: twelve idle polls, then
the claims that lose a job when a crash follows them. A sweep with no sample crashes the
first idle poll and the first claim, and finds the loss; keyed on the point alone (one
class) it would crash only the first poll and pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.engine.search._classes import choose
from tests._cli import harness_proc, run_harness
from tests.test_hooks import line_of

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = """\
[scenario]
system = "cmd:python -m tests._idle_poll_worker"
env = { DATABASE_URL = "{db.url}", WEBHOOK_URL = "{provider.url}/hooks", \
WEBHOOK_TOKEN = "{provider.credential}" }
seed = 1

[workload]
runs = 1
destinations_per_topic = 2

[provider]
preset = "webhook"
faults = []

[worker]
max_attempts = 1

[cases]
mode = "sweep"
"""


def _step_line() -> int:
    return line_of((ROOT / "tests" / "_idle_poll_worker.py").read_text(), "STEP")


def _sweep(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    scenario = tmp_path / "poller.toml"
    scenario.write_text(SCENARIO)
    return run_harness(ROOT, tmp_path, "sweep", str(scenario), "--determinism", "0", *args)


def test_one_case_per_class_finds_the_loss_behind_twelve_idle_polls(tmp_path: Path) -> None:
    status, said, report = _sweep(tmp_path, "--sample", "0")
    step = f"after_commit._idle_poll_worker.{_step_line()}"
    ran = {c["id"] for c in report["cases"]}
    # the first idle poll and the first claim of the line, none of the other thirteen
    assert {c for c in ran if c.startswith(f"crash@{step}#")} == {
        f"crash@{step}#1",
        f"crash@{step}#13",
    }, sorted(ran)
    assert status == 1, said
    verdicts = {c["id"]: c["verdict"] for c in report["cases"]}
    assert verdicts[f"crash@{step}#13"] == "fail", said
    assert verdicts[f"crash@{step}#1"] == "pass", said
    sweep = report["sweep"]
    assert sweep["hits_sampled"] == 0
    assert sweep["hits_left_out"] >= 13 * 2, sweep  # before_commit's and after_commit's
    assert sweep["hit_classes"] + sweep["hits_left_out"] == sweep["hits_reached"], sweep
    # left out is not covered: the covered pairs are those planned
    assert sweep["pairs_expected"] == len(ran) - 1  # every case but the dry run
    assert f"{sweep['hits_left_out']} left out, not covered (--all-hits" in said, said


def test_all_hits_and_a_sample_are_one_choice_or_the_other(tmp_path: Path) -> None:
    done = harness_proc(tmp_path, tmp_path, "sweep", "x.toml", "--all-hits", "--sample", "3")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--all-hits crashes every hit; --sample chooses some" in done.stderr


PAIRS = [("after_commit.w.5", h) for h in range(1, 7)] + [("after_send.w.9", 1), ("b", 1)]
CLASSES = {
    "after_commit.w.5": {
        1: "c|v|idle",
        2: "c|v|idle",
        3: "c|v|effect",
        4: "c|v|idle",
        5: "c|v|effect",
        6: "d|v|effect",
    },
    "after_send.w.9": {1: "c|v|effect"},
}


def test_the_first_hit_of_each_class_and_hits_in_no_class_are_always_chosen() -> None:
    choice = choose(PAIRS, CLASSES, seed=1, sample=0)
    assert choice.planned == [
        ("after_commit.w.5", 1),
        ("after_commit.w.5", 3),
        ("after_commit.w.5", 6),
        ("after_send.w.9", 1),
        ("b", 1),  # a named boundary: in no class, always crashed
    ]
    assert (choice.reached, choice.classes) == (8, 5)
    assert choice.left_out == [("after_commit.w.5", h) for h in (2, 4, 5)]
    assert "8 hits, 5 classes: 5 + 0 sampled, 3 left out" in choice.sentence()


def test_the_sample_is_drawn_from_the_seed_and_all_hits_takes_every_one() -> None:
    one = choose(PAIRS, CLASSES, seed=7, sample=2)
    assert one == choose(PAIRS, CLASSES, seed=7, sample=2)  # reproducible from the seed
    assert (len(one.sampled), len(one.left_out)) == (2, 1)
    assert set(one.sampled) | set(one.left_out) == {("after_commit.w.5", h) for h in (2, 4, 5)}
    drawn = {tuple(choose(PAIRS, CLASSES, seed=s, sample=1).sampled) for s in range(20)}
    assert len(drawn) > 1, "the seed chooses nothing"
    everything = choose(PAIRS, CLASSES, seed=7, all_hits=True)
    assert (everything.planned, everything.left_out) == (PAIRS, [])
    assert choose(PAIRS, CLASSES, seed=7, sample=99).left_out == []


def test_a_scenario_file_sets_the_sample_or_all_hits_and_not_both(tmp_path: Path) -> None:
    from harness.engine.plan import scenario as scenario_mod
    from harness.errors import BadInputError

    path = tmp_path / "poller.toml"
    path.write_text(SCENARIO + "sample = 3\n")
    loaded = scenario_mod.load(path)
    assert (loaded.sample, loaded.all_hits) == (3, False)
    path.write_text(SCENARIO + "all_hits = true\n")
    loaded = scenario_mod.load(path)
    assert (loaded.sample, loaded.all_hits) == (None, True)
    path.write_text(SCENARIO + "all_hits = true\nsample = 3\n")
    with pytest.raises(BadInputError, match=r"poller\.toml.*give one"):
        scenario_mod.load(path)
    path.write_text(SCENARIO + "sample = -1\n")
    with pytest.raises(BadInputError, match="sample"):
        scenario_mod.load(path)
