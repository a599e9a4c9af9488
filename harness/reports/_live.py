"""The report of a running campaign: rewritten after every case, finished or resumed later.

``certify`` hands ``LiveReport.record`` to the campaign as its per-case callback, so a
campaign stopped by Ctrl-C (or killed) leaves a valid report marked ``"partial": true``.
``certify --resume REPORT.json`` reads such a report (``plan_resume``), runs only the planned
cases it lacks, and ``LiveReport`` merges the carried-over case JSON with the new ones.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import BadInputError
from harness.reports._contract import assemble, case_json, load_report

if TYPE_CHECKING:
    from harness.engine.results import CampaignSettings, CaseResult


class LiveReport:
    """Case JSON collected so far (carried-over ones first) and the files written from it."""

    def __init__(
        self,
        settings: CampaignSettings,
        report_dir: Path,
        *,
        plan: Sequence[str],
        full: bool,
        previous: Sequence[Mapping[str, Any]] = (),
        started_at: float | None = None,
        workdir: Path | None = None,
        determinism: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.settings = settings
        self.report_dir = report_dir
        self.plan = list(plan)
        self.full = full
        self.cases: list[dict[str, Any]] = [dict(c) for c in previous]
        self.started_at = started_at if started_at is not None else time.time()
        self.workdir = workdir
        self.paths: dict[str, Path] = {}
        #: the campaign's determinism sample, once it returns one
        self.determinism: list[dict[str, Any]] = [dict(d) for d in determinism]
        #: top-level sections the campaign adds (a certify's ``recovery_sample``)
        self.extra: dict[str, Any] = {}
        self._svg_cache: dict[str, str] = {}

    @property
    def json_path(self) -> Path:
        from harness.reports import FILES

        return self.report_dir / FILES["json"]

    def record(self, case: CaseResult) -> None:
        """Add a finished case and rewrite every report file, still marked partial."""
        timeline = None
        if case.verdict.value != "pass" and self.workdir is not None:
            from harness.engine.store.timeline import timeline_from_workdir

            timeline = timeline_from_workdir(self.workdir, case.spec.slug)
        self.cases = [c for c in self.cases if c["id"] != case.spec.id]
        self.cases.append(case_json(case, timeline=timeline))
        self.write(partial=True)

    def report(self, *, partial: bool) -> dict[str, Any]:
        data = assemble(
            settings=self.settings,
            cases=self.cases,
            plan=self.plan,
            full=self.full,
            started_at=self.started_at,
            finished_at=time.time(),
            workdir=self.workdir,
            partial=partial,
            report_path=self.json_path,
            determinism=self.determinism,
        )
        for key, value in self.extra.items():
            data.setdefault(key, value)
        return data

    def write(self, *, partial: bool) -> dict[str, Any]:
        """Write all four formats; returns the report JSON that was written."""
        from harness.reports import write_all

        data = self.report(partial=partial)
        self.paths = write_all(data, self.report_dir, svg_cache=self._svg_cache)
        return data


@dataclass
class ResumePlan:
    """What ``certify --resume`` runs, and what it carries over from the partial report."""

    system: str
    seed: int
    db_url: str | None
    plan: list[str]
    full: bool
    remaining: list[str]
    previous: list[dict[str, Any]] = field(default_factory=list)
    started_at: float | None = None
    determinism: list[dict[str, Any]] = field(default_factory=list)


def plan_resume(
    path: Path,
    *,
    system: str | None,
    seed: int | None,
    db_url: str | None,
    case_ids: Sequence[str],
) -> ResumePlan:
    """Read a (partial) report and check the flags given with ``--resume`` agree with it.

    ``system``, ``seed`` and ``db_url`` are the values the user typed (None if not given);
    a value that differs from the report's is an error, never silently preferred.
    """
    from harness.engine.plan._plan import default_cases
    from harness.engine.store import _db
    from harness.systems import resolve

    report = load_report(path)
    if case_ids:
        raise BadInputError(
            "--case cannot be combined with --resume: the report's plan decides which cases run"
        )
    conflicts = []
    if system is not None and system != report["system"]:
        conflicts.append(f"--system {system} (the report is for {report['system']})")
    if seed is not None and seed != report["seed"]:
        conflicts.append(f"--seed {seed} (the report used seed {report['seed']})")
    recorded_url = report.get("database_url")
    url: str | None
    if db_url is not None:
        url = _db.normalise_url(db_url)
        shown = _shown(url)
        if recorded_url is None and "database_url" in report:
            conflicts.append(f"--db {shown} (the report used the default per-case SQLite files)")
        elif recorded_url is not None and _shown(recorded_url) != shown:
            conflicts.append(f"--db {shown} (the report used {recorded_url})")
        elif recorded_url is None and report["database"] != (
            "postgresql" if url.startswith("postgresql") else "sqlite"
        ):
            conflicts.append(f"--db {shown} (the report used {report['database']})")
    else:
        if recorded_url is not None and "***" in recorded_url:
            raise BadInputError(
                f"--resume: the report's database URL {recorded_url} hides its password;"
                " pass the same URL with --db"
            )
        if recorded_url is None and report["database"] == "postgresql":
            raise BadInputError("--resume: the report ran on PostgreSQL; pass its URL with --db")
        url = _db.normalise_url(recorded_url) if recorded_url else None
    if conflicts:
        raise BadInputError(
            f"--resume {path}: these flags conflict with the report: " + "; ".join(conflicts)
        )
    plan_data = report.get("plan")
    if plan_data is not None:
        plan, full = list(plan_data["cases"]), bool(plan_data["full"])
    else:  # a report written before plans were recorded: assume the default campaign
        plan, full = [c.id for c in default_cases(resolve(report["system"]))], True
    done = {c["id"] for c in report["cases"]}
    return ResumePlan(
        system=report["system"],
        seed=int(report["seed"]),
        db_url=url,
        plan=plan,
        full=full,
        remaining=[i for i in plan if i not in done],
        previous=list(report["cases"]),
        started_at=float(report["started_at"]),
        determinism=list(report.get("determinism") or []),
    )


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url
