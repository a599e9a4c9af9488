"""What a PostgreSQL case's own database costs against its own schema (``[database]
isolation``), per case, with the reference system's ledger.

Each round makes, prepares and drops one case's ledger by every route, in turn (so the load
of the machine falls on all of them alike), through the harness's own functions:

- schema: ``CREATE SCHEMA`` in the given database, the ledger built in it, ``DROP SCHEMA``
  (the default);
- database from template: ``CREATE DATABASE ... TEMPLATE`` of the campaign's prepared
  template database (made once, before the rounds; its cost is printed apart), ``DROP
  DATABASE ... WITH (FORCE)`` (what ``isolation = "database"`` does);
- database, built: an empty ``CREATE DATABASE``, the ledger built in it, then dropped (what
  the template saves).

It prints the median wall milliseconds of each, and the database routes' split into make
(create, and build) and drop. Not a bench_*.py: it needs the server named by
``CRASH_HARNESS_PG_URL`` and says so when that is unset.

``CRASH_HARNESS_PG_URL=postgresql://... python benchmarks/db_isolation_cost.py [ROUNDS]``
(default 30).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import systems
from harness.engine.case.campaign import workload_for
from harness.engine.case.prepare import _build_ledger
from harness.engine.results import CampaignSettings
from harness.engine.store import _db


def main(rounds: int) -> int:
    given = os.environ.get("CRASH_HARNESS_PG_URL")
    if not given:
        print("set CRASH_HARNESS_PG_URL to a PostgreSQL server to measure; nothing measured")
        return 2
    url = _db.normalise_url(given)
    system = systems.resolve("reference")
    workload = workload_for(CampaignSettings(system=system, seed=1))

    def prepare(engine: object) -> None:
        _build_ledger(system, workload, engine)  # type: ignore[arg-type]

    times: dict[str, list[float]] = {}

    def timed(name: str, step: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = step()
        times.setdefault(name, []).append((time.perf_counter() - start) * 1000)
        return result

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        template = work / ".ledger-template-bench.sqlite"
        try:
            first = _db.new_target(url, workdir=work, case_slug="first", isolation="database")
            start = time.perf_counter()
            _db.prepare_target(first, prepare, template=template)
            made_ms = (time.perf_counter() - start) * 1000
            _db.drop_target(first)
            for _ in range(rounds):
                for route, isolation, tpl in (
                    ("schema", "schema", None),
                    ("database from template", "database", template),
                    ("database, built", "database", None),
                ):

                    def make(isolation: str = isolation, tpl: Path | None = tpl) -> object:
                        target = _db.new_target(
                            url, workdir=work, case_slug="bench", isolation=isolation
                        )
                        _db.prepare_target(target, prepare, template=tpl)
                        return target

                    start = time.perf_counter()
                    target = timed(f"{route}: make", make)
                    timed(f"{route}: drop", lambda t=target: _db.drop_target(t))  # type: ignore[misc]
                    times.setdefault(route, []).append((time.perf_counter() - start) * 1000)
        finally:
            _db.drop_templates(work)
    print(f"{rounds} rounds on {os.cpu_count()} cores; median wall ms per case:")
    for name in ("schema", "database from template", "database, built"):
        print(
            f"  {name:<24} {statistics.median(times[name]):7.1f}"
            f"   (make {statistics.median(times[name + ': make']):6.1f},"
            f" drop {statistics.median(times[name + ': drop']):6.1f})"
        )
    ratio = statistics.median(times["database from template"]) / statistics.median(times["schema"])
    print(f"  database from template / schema: {ratio:.2f}x")
    print(f"  the campaign's template database, made once (with the first case): {made_ms:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
