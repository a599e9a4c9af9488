"""``roster_change`` variants end to end: the reference delivers once per person to the list
frozen at commit whatever the roster does, and ``recompute_destinations`` is caught when the
roster it re-reads lists a person under two spellings.

Runs on SQLite and PostgreSQL (``db_url``) where the test takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.engine.case.campaign import CampaignSettings, CaseResult, CaseSpec, run_campaign
from harness.errors import BadInputError
from harness.faults import roster_change
from harness.faults.roster_change import change_roster
from harness.invariants import Status
from harness.reference.schema import Base, RosterEntry
from harness.systems import resolve

#: written out (not imported) so that this file still collects on a harness without them
ARGS = [
    "add",
    "drop",
    "respell_case",
    "respell_space",
    "respell_nfd",
    "dup_case",
    "dup_space",
    "dup_nfd",
]


def test_every_variant_is_tested() -> None:
    assert [None, *ARGS] == list(roster_change.VARIANTS)


def _run(
    system: str, case: str, tmp_path: Path, db_url: str | None = None, **extra: Any
) -> CaseResult:
    settings = CampaignSettings(
        system=resolve(system),
        seed=4,
        db_url=db_url,
        cases=[CaseSpec.parse(case)],
        workdir=tmp_path,
        **extra,
    )
    return run_campaign(settings).cases[0]


def _changes(result: CaseResult) -> list[dict[str, Any]]:
    """The roster changes the harness recorded, as frozen_destinations quotes them."""
    changes: list[dict[str, Any]] = result.invariants["frozen_destinations"].evidence[
        "roster_changes"
    ]
    return changes


@pytest.mark.parametrize("place", ["after_result_commit#1", "destinations_resolved#2"])
@pytest.mark.parametrize("arg", ARGS)
def test_reference_holds_under_every_roster_variant(
    arg: str, place: str, db_url: str | None, tmp_path: Path
) -> None:
    """Committed runs keep their frozen list, later runs take the new roster, nobody gets a
    message twice, and the planned change really happened."""
    result = _run("reference", f"roster_change@{place}:{arg}", tmp_path, db_url)
    failed = {n: r.summary for n, r in result.invariants.items() if r.status is not Status.PASS}
    assert result.verdict is Status.PASS, (failed, result.notes)
    assert result.crash_fired
    (change,) = _changes(result)
    assert change["variant"] == arg
    if arg.startswith(("respell_", "dup_")):
        for respelled in change["respelled"]:  # one per topic
            assert respelled["from"] != respelled["to"]
            assert (respelled["from"] in change["removed"]) is arg.startswith("respell_")
    # every intended recipient was reached exactly once
    assert result.accepted == result.intended


@pytest.mark.parametrize("arg", ["dup_space", "dup_nfd"])
def test_recompute_destinations_is_caught_by_exactly_once_when_the_roster_lists_a_person_twice(
    arg: str, tmp_path: Path
) -> None:
    """After the crash the roster lists one address twice (another spelling added); the mutant
    re-reads it and sends the run to both spellings: one person, two messages."""
    result = _run(
        "mutant:recompute_destinations", f"roster_change@after_result_commit#1:{arg}", tmp_path
    )
    assert result.verdict is Status.FAIL
    check = result.invariants["exactly_once_effect"]
    assert check.status is Status.FAIL, check
    (dup,) = check.evidence["duplicates"]
    (respelled, _) = _changes(result)[0]["respelled"]
    assert dup["spellings"] == sorted([respelled["from"], respelled["to"]])


def test_recompute_destinations_is_caught_by_exactly_once_on_smtp_for_a_case_respelling(
    tmp_path: Path,
) -> None:
    """On an e-mail surface a case-only re-spelling is the same mailbox (payments would call
    it another account, and frozen_destinations catches that instead)."""
    result = _run(
        "mutant:recompute_destinations",
        "roster_change@after_result_commit#1:dup_case",
        tmp_path,
        provider_preset="smtp",
    )
    check = result.invariants["exactly_once_effect"]
    assert check.status is Status.FAIL, check
    assert len(check.evidence["duplicates"][0]["spellings"]) == 2


def test_an_unknown_roster_variant_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="respell_case"):
        _run("reference", "roster_change@after_result_commit#1:respell_kase", tmp_path)


def _roster(tmp_path: Path, variant: str | None) -> tuple[dict[str, object], list[str]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'roster.sqlite'}")
    Base.metadata.create_all(engine)
    with Session(engine) as s, s.begin():
        s.add_all(RosterEntry(topic="t", destination=d) for d in ("alice@x.org", "bob@x.org"))
    change = change_roster(engine, ["t"], variant)
    with Session(engine) as s:
        now = sorted(s.scalars(select(RosterEntry.destination)))
    engine.dispose()
    return change, now


@pytest.mark.parametrize(
    ("variant", "roster"),
    [
        (None, ["bob@x.org", "late-joiner-1.t@example.org"]),
        ("add", ["alice@x.org", "bob@x.org", "late-joiner-1.t@example.org"]),
        ("drop", ["bob@x.org"]),
        ("respell_case", ["Alice@X.org", "bob@x.org"]),
        ("respell_space", [" alice@x.org ", "bob@x.org"]),
        ("dup_case", ["Alice@X.org", "alice@x.org", "bob@x.org"]),
        ("dup_space", [" alice@x.org ", "alice@x.org", "bob@x.org"]),
    ],
)
def test_each_variant_changes_the_roster_as_documented(
    variant: str | None, roster: list[str], tmp_path: Path
) -> None:
    change, now = _roster(tmp_path, variant)
    assert now == roster
    assert change["new_roster"] == {"t": roster}


def test_a_respelling_with_nothing_left_to_respell_did_not_land(tmp_path: Path) -> None:
    """The default change drops the accented name ``dup_nfd`` would re-spell: the second step
    changes nothing, so it did not land (a gap), never an error raised mid-case (explore drew
    this schedule and its search died with a BadInputError)."""
    case = "roster_change@before_result_commit#1+roster_change@before_result_commit#1:dup_nfd"
    result = _run("reference", case, tmp_path)
    assert result.verdict is Status.GAP, result.verdict
    first, second = result.step_records
    assert first.landing.value == "landed", first
    assert second.landing.value == "unconfirmed", second
    assert "found nothing to change" in second.detail


# -- on every surface the reference speaks (#26 item 6) -----------------------------------------

#: re-spelling variants: another spelling in place of a destination, or beside it
RESPELLINGS = [a for a in ARGS if a.startswith(("respell_", "dup_"))]


def test_built_in_scenarios_re_spell_on_every_surface_the_reference_speaks() -> None:
    """Not only on payments: a built-in runs every re-spelling on each surface with a normal
    form the reference speaks (webhook has one, but no shipped system speaks it)."""
    from harness.engine.plan import scenario as scenario_mod

    reached: dict[str, set[str]] = {}
    for path in scenario_mod.builtin_paths():
        scenario = scenario_mod.load(path)
        preset = scenario.campaign_fields().get("provider_preset", "payments")
        for spec in scenario.cases:
            for step in spec.steps:
                if step.fault == "roster_change" and step.arg in RESPELLINGS:
                    reached.setdefault(preset, set()).add(step.arg)
    speaks = resolve("reference").speaks or ()
    assert {"payments", "smtp", "chat", "queue-fifo"} <= set(speaks)
    for preset in speaks:
        assert reached.get(preset) == set(RESPELLINGS), preset


@pytest.mark.parametrize("arg", ["respell_nfd", "dup_nfd"])
def test_the_reference_writes_to_a_non_ascii_mailbox_over_smtputf8(
    arg: str, tmp_path: Path
) -> None:
    """The NFD variants give a mailbox an accented name: the reference sent it with
    SMTPUTF8 (it used to die on smtplib's ASCII RCPT) and reached every person once."""
    result = _run(
        "reference", f"roster_change@after_result_commit#1:{arg}", tmp_path, provider_preset="smtp"
    )
    failed = {n: r.summary for n, r in result.invariants.items() if r.status is not Status.PASS}
    assert result.verdict is Status.PASS, (failed, result.notes)
    assert result.accepted == result.intended
    (change,) = _changes(result)
    assert any(not r["to"].isascii() for r in change["respelled"])
