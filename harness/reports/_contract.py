"""The report contract: build ``crash-harness/report/v1`` JSON, summarise, merge and validate it.

Every rendered format (Markdown, JUnit XML, HTML) is made from this JSON and nothing else, so a
report can be re-rendered later and the formats cannot drift apart. v1 only ever gains fields;
readers must not require the ones documented as optional in ``reports/README.md``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import __version__
from harness.engine.process import _wall
from harness.engine.store import _secrets
from harness.errors import BadInputError
from harness.names import BOUNDARIES, NEAR_SIDE_KINDS, near_side_kind

if TYPE_CHECKING:
    from harness.engine.results import CampaignResult, CampaignSettings, CaseResult

SCHEMA = "crash-harness/report/v1"
SCHEMA_FILE = "report-v1.schema.json"

#: ``@BOUNDARY#HIT`` inside a case id (``crash@a#1+crash@b#2``, ``pause_past_lease@a#1``...)
_PLACE = re.compile(r"@(?P<boundary>[a-z][a-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)#[1-9][0-9]*")
#: ``scheme://user:password@`` in any string of a report: the password is replaced


class ReportError(BadInputError):
    """A report file cannot be read, is not JSON, or does not match the v1 schema."""


# -- building ---------------------------------------------------------------------------------


def to_json(result: CampaignResult) -> dict[str, Any]:
    """The whole report of a finished campaign (timelines read from its work dir, if kept)."""
    cases = [case_json(c, timeline=_timeline_for(c, result.workdir)) for c in result.cases]
    settings = result.settings
    data = assemble(
        settings=settings,
        cases=cases,
        plan=planned_case_ids(settings),
        full=settings.cases is None,
        started_at=result.started_at,
        finished_at=result.finished_at or time.time(),
        workdir=result.workdir,
        partial=False,
        determinism=determinism_of(result),
    )
    _campaign_coverage(data["summary"], result)
    for key, value in getattr(result, "extra", {}).items():
        if key != "determinism":
            data.setdefault(key, redact(value))
    return data


def _campaign_coverage(summary: dict[str, Any], result: CampaignResult) -> None:
    """The campaign's own word on coverage wins (a sweep may promise more than a plan)."""
    summary["boundaries_covered"] = len(result.covered())
    summary["boundaries_uncovered"] = list(result.uncovered())


def determinism_of(result: Any) -> list[dict[str, Any]]:
    """The campaign's determinism sample, if it took one (``{case, first, rerun, agree}``)."""
    entries = []
    sample = getattr(result, "determinism", None) or getattr(result, "extra", {}).get("determinism")
    for entry in sample or ():
        if not isinstance(entry, Mapping) and hasattr(entry, "to_json"):
            entry = entry.to_json()
        if isinstance(entry, Mapping):
            entries.append(dict(entry))
    return entries


def _timeline_for(case: CaseResult, workdir: Path | None) -> list[dict[str, Any]] | None:
    """A timeline for every case that did not pass, while its trace is still on disk."""
    from harness.engine.store.timeline import timeline_from_workdir

    if case.verdict.value == "pass" or workdir is None:
        return None
    return timeline_from_workdir(workdir, case.spec.slug)


def case_json(case: CaseResult, *, timeline: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One case as the report carries it: ``CaseResult.to_json`` plus the optional v1 fields."""
    data = case.to_json()
    supplied = data.get("timeline") or getattr(case, "timeline", None)
    if supplied:  # the campaign recorded it; prefer that to a rebuild from files
        timeline = list(supplied)
    by_pid = {w.pid: w for w in case.workers}
    for worker in data.get("workers", []):
        live = by_pid.get(worker.get("pid"))
        if live is not None:
            worker.setdefault("started_at", live.started_at)
            worker.setdefault("ended_at", live.ended_at)
    if case.workers:
        data.setdefault("started_at", min(w.started_at for w in case.workers))
    if timeline:
        data["timeline"] = timeline
        outcomes: dict[str, int] = {}
        for ev in timeline:
            if ev["kind"] == "effect":
                outcome = str(ev["detail"].get("outcome", ev["label"]))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcomes:
            data["effects"].setdefault("by_outcome", outcomes)
    else:
        data.pop("timeline", None)
    return data


def planned_case_ids(settings: CampaignSettings) -> list[str]:
    from harness.engine.plan._plan import default_cases

    names = [spec.name for spec in settings.provider_specs()]
    cases = settings.cases if settings.cases is not None else default_cases(settings.system, names)
    return [c.id for c in cases]


def assemble(
    *,
    settings: CampaignSettings,
    cases: Sequence[Mapping[str, Any]],
    plan: Sequence[str],
    full: bool,
    started_at: float,
    finished_at: float,
    workdir: Path | None,
    partial: bool,
    report_path: Path | None = None,
    determinism: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The report from case JSON objects (fresh or carried over from a partial report)."""
    system = settings.system
    url = settings.db_url
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": "crash-harness", "version": __version__},
        "seed": settings.seed,
        "system": system.name,
        "expected_violation": system.expected_violation,
        "database": "postgresql" if url and url.startswith("postgresql") else "sqlite",
        "database_url": _hide_password(url) if url else None,
        "environment": environment(),
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_s": round(max(0.0, finished_at - started_at), 3),
        "workdir": str(workdir) if workdir else None,
        "partial": partial,
        "plan": {"cases": list(plan), "full": full},
        "replay": campaign_command(settings, full=full, plan=plan),
        "resume": (
            shlex.join(["crash-harness", "certify", "--resume", str(report_path)])
            if partial and report_path is not None
            else None
        ),
        "cases": order_cases(cases, plan),
        "determinism": [dict(d) for d in determinism],
    }
    data["coverage"] = coverage(data["cases"], system.boundaries, plan=plan, full=full)
    data["summary"] = summary_of(data["cases"], system.boundaries, plan=plan, full=full)
    redacted: dict[str, Any] = redact(data)
    return redacted


def environment() -> dict[str, Any]:
    import sqlalchemy

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "python_implementation": platform.python_implementation(),
        "sqlalchemy": sqlalchemy.__version__,
        "cpu_count": os.cpu_count(),
        "ci": bool(os.environ.get("CI")),
        # what walled the workers off from the harness and its providers, or what was missing
        "isolation": _wall.describe(),
    }


def campaign_command(settings: CampaignSettings, *, full: bool, plan: Sequence[str]) -> str:
    """The command that reruns the whole campaign (each case also carries its own replay)."""
    prefix = getattr(settings, "replay_prefix", None)
    parts = list(prefix or ["crash-harness", "certify", "--system", settings.system.name])
    parts += ["--seed", str(settings.seed)]
    if not full:
        for case_id in plan:
            parts += ["--case", case_id]
    if settings.db_url is not None:
        parts += ["--db", _hide_password(settings.db_url)]
    return shlex.join(parts)


def order_cases(cases: Iterable[Mapping[str, Any]], plan: Sequence[str]) -> list[dict[str, Any]]:
    """Cases in plan order (a resumed campaign appends out of order); unplanned ones last,
    a depth-2 case grouped under the first crash it was planned from (as a sweep runs them)."""
    rank = {case_id: i for i, case_id in enumerate(plan)}
    listed = [dict(c) for c in cases]

    def key(case: Mapping[str, Any]) -> tuple[int, int]:
        if case["id"] in rank:
            return 0, rank[case["id"]]
        return 1, rank.get(first_step_id(case["id"]), len(rank))

    return sorted(listed, key=key)


def first_step_id(case_id: str) -> str:
    """``crash@a#1+crash@b#2`` -> ``crash@a#1``: the case a depth-2 case was planned from."""
    return case_id.split("+", 1)[0]


def coverage(
    cases: Sequence[Mapping[str, Any]],
    boundaries: Sequence[str],
    *,
    plan: Sequence[str],
    full: bool,
) -> list[dict[str, Any]]:
    """Per documented boundary: did a crash land on it, in which cases, how often reached."""
    done = {c["id"] for c in cases}
    pending = {b for i in plan if i not in done for b in _boundaries_of(i)}
    planned = {b for i in plan for b in _boundaries_of(i)}
    entries = []
    for name in boundaries:
        landed = [c["id"] for c in cases if c.get("crash_fired") and name in _case_boundaries(c)]
        reached = sum(int(c.get("boundaries_reached", {}).get(name, 0)) for c in cases)
        entry: dict[str, Any] = {
            "boundary": name,
            "description": BOUNDARIES.get(name) or _point_description(name),
            "covered": bool(landed),
            "planned": full or name in planned,
            "cases": landed,
            "hits_reached": reached,
        }
        if not landed and name in pending:
            entry["pending"] = True
        entries.append(entry)
    return entries


def _point_description(name: str) -> str:
    """A discovered near-side point: what its kind means (what it talked to is a reading of
    the run, a port and a temp path: in each case's ``point_targets``, not here)."""
    kind = near_side_kind(name)
    return "" if kind is None else NEAR_SIDE_KINDS[kind]


def _boundaries_of(case_id: str) -> list[str]:
    return [m.group("boundary") for m in _PLACE.finditer(case_id)]


def _case_boundaries(case: Mapping[str, Any]) -> list[str]:
    """Every boundary a case's steps armed (the lead one first)."""
    found = _boundaries_of(str(case["id"]))
    if case.get("boundary") and case["boundary"] not in found:
        found.insert(0, case["boundary"])
    return found


def summary_of(
    cases: Sequence[Mapping[str, Any]],
    boundaries: Sequence[str],
    *,
    plan: Sequence[str],
    full: bool,
) -> dict[str, Any]:
    from harness.invariants import CHECKERS, fixes, looks

    verdicts = [c["verdict"] for c in cases]
    violated = sorted(  # a flaky case's failure stands: it was seen (``outcome.judge``)
        {name for c in cases for name, r in c["invariants"].items() if r["status"] == "fail"}
    )
    checked = list(CHECKERS)
    for c in cases:
        checked += [n for n in c["invariants"] if n not in checked]
    entries = coverage(cases, boundaries, plan=plan, full=full)
    covered = [e["boundary"] for e in entries if e["covered"]]
    # Only a full campaign promises every boundary; a partial one is not judged on the
    # boundaries whose cases have not run yet.
    uncovered = (
        [e["boundary"] for e in entries if not e["covered"] and not e.get("pending")]
        if full
        else []
    )
    done = {c["id"] for c in cases}
    return {
        "cases": len(verdicts),
        "passed": verdicts.count("pass"),
        "failed": verdicts.count("fail"),
        "unknown": verdicts.count("unknown"),
        "gaps": verdicts.count("gap"),
        "flaky": verdicts.count("flaky"),
        "not_run": sum(1 for i in plan if i not in done),
        "boundaries_documented": len(boundaries),
        "boundaries_covered": len(covered),
        "boundaries_uncovered": uncovered,
        "invariants_checked": checked,
        "invariants_violated": violated,
        **looks.judged(cases).to_json(),
        "fixes": {
            name: {"fix": fixes.FIXES[name], "doc": fixes.link(name)}
            for name in violated
            if name in fixes.FIXES
        },
    }


def summarise(result: CampaignResult) -> dict[str, Any]:
    """The ``summary`` object of a finished campaign's report."""
    settings = result.settings
    summary = summary_of(
        [c.to_json() for c in result.cases],
        settings.system.boundaries,
        plan=planned_case_ids(settings),
        full=settings.cases is None,
    )
    _campaign_coverage(summary, result)
    return summary


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    _secrets.hand_out_url(url)  # a ?password= is no less a password
    try:
        return _secrets.scrub(make_url(url).render_as_string(hide_password=True))
    except Exception:
        return _secrets.scrub(_secrets.hide_url_passwords(url))


def redact(value: Any) -> Any:
    """Hide every ``scheme://user:password@`` password, and every secret the harness handed
    out (``harness.engine.store._secrets``), in every string of a report."""
    if isinstance(value, str):
        value = _secrets.scrub(value)
        return _secrets.hide_url_passwords(value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


# -- reading and validating -------------------------------------------------------------------


@cache
def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``crash-harness/report/v1``, shipped in the package."""
    text = resources.files("harness.reports").joinpath(SCHEMA_FILE).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def schema_errors(report: Any) -> list[str]:
    """Every place ``report`` breaks the v1 schema, as ``path: message`` (empty if valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json_schema())
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors]


def validate(report: Any) -> None:
    """Raise ``ReportError`` naming the first problems if ``report`` is not a valid v1 report."""
    errors = schema_errors(report)
    if errors:
        shown = "; ".join(errors[:5]) + (f"; and {len(errors) - 5} more" if len(errors) > 5 else "")
        raise ReportError(f"not a valid {SCHEMA} report: {shown}")


def load_report(path: Path) -> dict[str, Any]:
    """Read and validate a report file; errors name the file and what is wrong with it."""
    from harness.engine.store import _paths

    if _paths.exists(path, "report") and not path.is_file():  # a FIFO would block forever
        raise ReportError(f"cannot read report {path}: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot read report {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ReportError(f"{path} is not JSON: not UTF-8 text at byte {exc.start}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ReportError(f"{path}: expected schema {SCHEMA!r}, found {found!r}")
    try:
        validate(data)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None
    return data


# -- writing ----------------------------------------------------------------------------------


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # a report is for reading: mkstemp's 0600 is not
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # a write or fsync: say which report it was
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps(report: Mapping[str, Any]) -> str:
    """The report as strict JSON: a NaN or an infinity (which JSON has no word for, and most
    readers refuse) is written as the string ``"nan"``/``"inf"``, never as a bare token."""
    return json.dumps(_finite(report), indent=2, sort_keys=False, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
