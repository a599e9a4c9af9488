"""``[scenario] prepare_sql``: a program that reads its work from a table of its own (an
agent as it ships) is given it in a line of SQL over the work the harness seeded, instead of
a Python ``prepare`` module; the intent stays the harness's own seeded work."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine.plan import scenario as scenario_mod
from harness.errors import BadInputError
from tests._cli import run_harness

ROOT = Path(__file__).resolve().parent.parent

FILL = [
    "CREATE TABLE announcements (id TEXT, recipient TEXT, body TEXT)",
    "INSERT INTO announcements SELECT r.run_id, d.destination, r.input_payload"
    " FROM run_requests r JOIN roster d ON d.topic = r.topic",
]


def _scenario(tmp_path: Path, statements: list[str], extra: str = "") -> Path:
    listed = ", ".join(f'"{s}"' for s in statements)
    path = tmp_path / "own.toml"
    path.write_text(
        "[scenario]\n"
        'system = "cmd:python -m tests._own_table_worker"\n'
        'env = { DATABASE_URL = "{db.url}", WEBHOOK_URL = "{provider.url}/hooks",'
        ' WEBHOOK_TOKEN = "{provider.credential}" }\n'
        f"prepare_sql = [{listed}]\n"
        f"{extra}"
        "seed = 1\n"
        '[provider]\npreset = "webhook"\nfaults = []\n'
    )
    return path


def test_a_program_reading_its_own_table_is_filled_by_sql_and_judged_on_the_seeded_work(
    tmp_path: Path,
) -> None:
    """Its baseline: every seeded delivery is accepted once, judged against the work the
    harness seeded (without prepare_sql the program finds no table and dies)."""
    path = _scenario(tmp_path, FILL)
    status, said, report = run_harness(
        ROOT, tmp_path, "run", str(path), "--case", "baseline", "--determinism", "0"
    )
    assert status == 0, said
    (case,) = report["cases"]
    assert case["verdict"] == "pass", said
    assert case["effects"]["accepted"] == case["effects"]["intended"] > 0, case["effects"]
    assert case["invariants"]["no_silent_loss"]["status"] == "pass", said


def test_a_statement_that_fails_is_named_with_its_number_and_the_database_error(
    tmp_path: Path,
) -> None:
    path = _scenario(tmp_path, [FILL[0], "INSERT INTO nowhere VALUES (1)"])
    status, said, _report = run_harness(ROOT, tmp_path, "run", str(path), "--case", "baseline")
    assert status == 2, said
    assert "prepare_sql statement 2 failed on the case's database" in said, said
    assert "nowhere" in said, said
    assert "Traceback" not in said, said


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('system = "reference"\nprepare_sql = ["SELECT 1"]\n', "only a cmd: system"),
        ('system = "cmd:true"\nprepare_sql = []\n', "expected a non-empty list"),
        ('system = "cmd:true"\nprepare_sql = [1]\n', "expected a non-empty list"),
        (
            'system = "cmd:true"\nprepare = "m:f"\nprepare_sql = ["SELECT 1"]\n',
            "prepare and prepare_sql both given",
        ),
    ],
)
def test_a_prepare_sql_the_harness_cannot_run_is_refused_at_its_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[scenario]\n" + text)
    with pytest.raises(BadInputError, match=rf"bad.toml:\d+: \[scenario.prepare_sql\] {expected}"):
        scenario_mod.load(path)
