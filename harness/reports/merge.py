"""Merge the reports of one campaign split across CI jobs (``--shard i/n``) into one report.

A shard report records its shard (``shard``: ``index``, ``count`` and the whole campaign's
``plan``, in order), so the shards can be checked against each other and put back in the
order the unsharded campaign would have run them (shard ``i/n`` ran ``plan[i-1::n]``).
Coverage and summary are recomputed over the merged cases by the same code that writes a
report (``assemble``); the verdict is the one the command that wrote the shards gives.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from harness.errors import BadInputError, ExitStatus, HarnessError
from harness.reports._contract import (
    SCHEMA,
    ReportError,
    assemble,
    first_step_id,
    order_cases,
    validate,
)

#: fields every shard of one campaign must agree on, as (field, what it is)
_SAME = (
    ("schema", "report schema"),
    ("system", "system under test"),
    ("seed", "seed"),
    ("database", "database kind"),
)


def merge_reports(
    reports: Sequence[Mapping[str, Any]],
    sources: Sequence[str],
    *,
    allow_partial: bool = False,
) -> dict[str, Any]:
    """One schema-v1 report from the shard reports ``reports`` (read from ``sources``).

    Raises ``BadInputError`` naming the file and the field when the shards are not of one
    campaign, overlap, or (unless ``allow_partial``) do not cover every ``i/n``; a merge with
    shards missing says which in ``merged.missing``, is marked partial, and never passes.
    """
    if not reports:
        raise BadInputError("report merge: no shard reports given")
    if len(sources) != len(reports):
        raise HarnessError(f"{len(reports)} report(s) but {len(sources)} source name(s)")
    for report, source in zip(reports, sources, strict=True):
        _check_shard(report, source)
    first, first_source = reports[0], sources[0]
    for report, source in zip(reports[1:], sources[1:], strict=True):
        _check_same_campaign(first, first_source, report, source)

    seen_case: dict[str, int] = {}
    for k, (report, source) in enumerate(zip(reports, sources, strict=True)):
        for case in report["cases"]:
            other = seen_case.get(case["id"])
            if other is not None:
                where = "twice in that file" if other == k else f"also in {sources[other]}"
                if other != k and sources[other] == source:
                    where += " (the same file given twice)"
                raise BadInputError(
                    f"{source}: field 'cases': case id {case['id']!r} is {where};"
                    " each case belongs to exactly one shard"
                )
            seen_case[case["id"]] = k
    seen_shard: dict[int, str] = {}
    for report, source in zip(reports, sources, strict=True):
        index = int(report["shard"]["index"])
        if index in seen_shard:
            raise BadInputError(
                f"{source}: field 'shard': shard {_spec(report)} is also {seen_shard[index]}"
            )
        seen_shard[index] = source

    count = int(first["shard"]["count"])
    absent = [i for i in range(1, count + 1) if i not in seen_shard]
    missing = [f"{i}/{count}" for i in absent]
    if missing and not allow_partial:
        got = ", ".join(f"{_spec(r)} ({s})" for r, s in zip(reports, sources, strict=True))
        raise BadInputError(
            f"shard(s) {', '.join(missing)} missing (got {got}); pass every shard's report,"
            " or --allow-partial to merge what there is"
        )

    order = sorted(range(len(reports)), key=lambda k: int(reports[k]["shard"]["index"]))
    plan = [str(i) for i in first["shard"]["plan"]]
    full = bool(first.get("plan", {}).get("full", False))
    cases = [case for k in order for case in reports[k]["cases"]]
    # a depth-2 sweep's second crashes were planned by the shard that ran their first one:
    # they join the plan after it, grouped under their first crash, as the unsharded sweep
    # runs them
    planned = set(plan)
    plan += [c["id"] for c in order_cases([c for c in cases if c["id"] not in planned], plan)]
    done = {c["id"] for c in cases}
    data = assemble(
        settings=_settings_of(first),
        cases=cases,
        plan=plan,
        full=full,
        started_at=min(float(r["started_at"]) for r in reports),
        finished_at=max(float(r["finished_at"]) for r in reports),
        workdir=None,
        partial=bool(missing) or any(i not in done for i in plan),
        determinism=[d for k in order for d in reports[k].get("determinism") or ()],
    )
    if all(isinstance(r.get("sweep"), Mapping) for r in reports):
        data["sweep"] = _merged_sweep([reports[k]["sweep"] for k in order], plan, absent, count)
    # the shards ran elsewhere: say where, not where the merge ran
    data["environment"] = dict(first["environment"])
    data["database"] = first["database"]
    data["database_url"] = first.get("database_url")
    for key, value in first.items():
        if key not in data and key != "shard":  # the scenario, and sections added later
            data[key] = copy.deepcopy(value)
    data["merged"] = {
        "count": count,
        "shards": [
            {
                "shard": _spec(reports[k]),
                "source": sources[k],
                "cases": len(reports[k]["cases"]),
                "started_at": reports[k]["started_at"],
                "finished_at": reports[k]["finished_at"],
                "workdir": reports[k]["workdir"],
            }
            for k in order
        ],
        "missing": missing,
    }
    _, outcome = verdict(data)
    data["merged"]["outcome"] = outcome
    if isinstance(data.get("scenario"), Mapping):
        data["scenario"] = {**data["scenario"], "outcome": outcome}
    validate(data)
    return data


def verdict(report: Mapping[str, Any]) -> tuple[ExitStatus, str]:
    """The exit status and one-line outcome of a (merged) report, by the writer's own rule.

    A scenario report is judged as ``run``/``replay`` judge it (``judge``: its expected
    violation or the invariants it must hold; a disagreeing determinism rerun is
    inconclusive); any other as ``certify``: 1 on a failure or an uncovered boundary, else 3
    if a case is undecided, else 0. A report missing shards or cases is never a pass.
    """
    from harness.reports.outcome import Expectation, judge

    scenario = report.get("scenario")
    expect = Expectation.of_scenario(scenario if isinstance(scenario, Mapping) else None)
    outcome = judge(report, expect)
    status, message = outcome.status, outcome.message
    merged = report.get("merged")
    missing = list(merged.get("missing", ())) if isinstance(merged, Mapping) else []
    if missing:
        message += f"; shard(s) {', '.join(missing)} missing"
    incomplete = missing or report.get("partial") or report["summary"].get("not_run")
    if incomplete and status is not ExitStatus.VIOLATION:
        status = ExitStatus.INCONCLUSIVE
        message += ": not a pass"
    return status, message


# -- checks -----------------------------------------------------------------------------------


def _check_shard(report: Mapping[str, Any], source: str) -> None:
    """``report`` is a valid v1 report of one shard whose cases are its slice of the plan."""
    if report.get("schema") != SCHEMA:
        raise BadInputError(
            f"{source}: field 'schema' is {report.get('schema')!r}, expected {SCHEMA!r}"
        )
    try:
        validate(report)
    except ReportError as exc:
        raise ReportError(f"{source}: {exc}") from None
    shard = report.get("shard")
    if not isinstance(shard, Mapping):
        raise BadInputError(
            f"{source}: field 'shard' is missing: not a shard report (shards are written by"
            " `crash-harness run|replay SCENARIO --shard i/n`)"
        )
    index, count = int(shard["index"]), int(shard["count"])
    if not 1 <= index <= count:
        raise BadInputError(f"{source}: field 'shard': {index}/{count} is not a shard of {count}")
    expected = list(shard["plan"])[index - 1 :: count]
    mine = set(expected)
    whole = set(shard["plan"])
    ran = report.get("plan", {}).get("cases")
    if ran is not None and [c for c in ran if c in whole] != expected:
        raise BadInputError(
            f"{source}: field 'plan.cases' is not shard {index}/{count} of field 'shard.plan'"
        )
    # a depth-2 case belongs to the shard that ran the first crash it was planned from
    stray = [
        c["id"]
        for c in report["cases"]
        if c["id"] not in mine and (c["id"] in whole or first_step_id(c["id"]) not in mine)
    ]
    if stray:
        raise BadInputError(
            f"{source}: field 'cases': {', '.join(stray)} not in shard {index}/{count} of the plan"
        )


def _check_same_campaign(
    first: Mapping[str, Any], first_source: str, report: Mapping[str, Any], source: str
) -> None:
    """Every shard of one campaign agrees on what was run, where and from which seed."""
    pairs: list[tuple[str, str, Any, Any]] = [
        (name, what, first.get(name), report.get(name)) for name, what in _SAME
    ]
    first_sc, sc = first.get("scenario") or {}, report.get("scenario") or {}
    pairs += [
        ("scenario.name", "scenario", first_sc.get("name"), sc.get("name")),
        ("scenario.mode", "scenario mode", first_sc.get("mode"), sc.get("mode")),
        ("shard.count", "number of shards", first["shard"]["count"], report["shard"]["count"]),
        ("plan.full", "kind of plan", _full(first), _full(report)),
    ]
    for name, what, want, got in pairs:
        if want != got:
            raise BadInputError(
                f"{source}: field {name!r} is {got!r} but {first_source} has {want!r}:"
                f" the shards are not of one campaign (different {what})"
            )
    if list(first["shard"]["plan"]) != list(report["shard"]["plan"]):
        raise BadInputError(
            f"{source}: field 'shard.plan' differs from {first_source}'s: the shards are not"
            " of one campaign (different case lists)"
        )


def _merged_sweep(
    parts: Sequence[Mapping[str, Any]], plan: Sequence[str], absent: Sequence[int], count: int
) -> dict[str, Any]:
    """A sharded sweep's coverage: each shard counted the (boundary, hit) pairs of its own
    slice of the plan, so the covered counts add up; the pairs of an absent shard's slice are
    missing with those its own shard missed. The plan's crashes are the denominator."""
    position = {case_id: k for k, case_id in enumerate(plan)}
    crashes = [c for c in plan if c.startswith("crash@") and "+" not in c]  # depth 1
    missing_set = {str(m) for part in parts for m in part.get("pairs_missing", ())}
    missing_set |= {
        plan[k].removeprefix("crash@")
        for k in range(len(plan))
        if plan[k].startswith("crash@") and "+" not in plan[k] and (k % count) + 1 in absent
    }
    missing = sorted(missing_set, key=lambda pair: position.get(f"crash@{pair}", len(plan)))
    # every shard chose its hits from the same dry run: its counts are the campaign's
    hits = {k: v for k, v in parts[0].items() if k.startswith("hit")} if parts else {}
    return {
        **hits,
        "pairs_expected": len(crashes),
        "pairs_covered": sum(int(part.get("pairs_covered", 0)) for part in parts),
        "pairs_missing": missing,
        "boundaries_unreached": sorted(
            {str(b) for part in parts for b in part.get("boundaries_unreached", ())}
        ),
        "depth2_planned": sum(int(part.get("depth2_planned", 0)) for part in parts),
        "depth2_fired": sum(int(part.get("depth2_fired", 0)) for part in parts),
    }


def _full(report: Mapping[str, Any]) -> Any:
    return report.get("plan", {}).get("full")


def _spec(report: Mapping[str, Any]) -> str:
    return f"{report['shard']['index']}/{report['shard']['count']}"


# -- what ``assemble`` and ``judge`` need, rebuilt from the JSON ------------------------------


def _not_runnable(*_: object) -> NoReturn:
    raise HarnessError("a system rebuilt from a report cannot run a worker")


def _settings_of(report: Mapping[str, Any]) -> Any:
    """Campaign settings as far as a report records them (its system is never run).

    The system is not resolved by name: a merge must work where the system's code is not
    installed. Its boundaries are the report's coverage rows, which list every documented one.
    """
    from harness.engine.results import CampaignSettings
    from harness.names import BOUNDARIES
    from harness.systems import System

    boundaries = tuple(str(e["boundary"]) for e in report.get("coverage") or ()) or tuple(
        BOUNDARIES
    )
    system = System(
        name=str(report["system"]),
        description="rebuilt from a shard report",
        main=_not_runnable,
        prepare=_not_runnable,
        read_ledger=_not_runnable,
        boundaries=boundaries,
        expected_violation=report.get("expected_violation"),
    )
    prefix = None
    if report.get("replay"):  # "PREFIX... --seed S [--case ID]... [--db URL]"
        words = shlex.split(str(report["replay"]))
        if "--seed" in words:
            prefix = words[: words.index("--seed")]
    return CampaignSettings(
        system=system,
        seed=int(report["seed"]),
        db_url=report.get("database_url"),
        replay_prefix=prefix,
    )
