"""Cost of the HTML report: a timeline picture per drawn case (goal: <= 50 ms each) and the
page of a campaign with 51 failing cases (goal: <= 1 MB of HTML).

Renders the committed fixture (``tests/fixtures/report_failing.json``, two failing cases) and
a synthetic report with 51 failing cases, made by copying the fixture's failing cases under
distinct ids. Prints medians of several rounds, measured in one run, and each against its goal.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _quick import pick

from harness.reports import render_html
from harness.reports._svg import timeline_svg
from harness.reports.html import MAX_DRAWN_CASES

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "report_failing.json"
FAILING = 51
GOAL_MS = 50.0
GOAL_BYTES = 1_000_000


def many_failing(report: dict[str, Any], total: int) -> dict[str, Any]:
    """The report with its failing cases copied until ``total`` fail, each under its own id
    (the same boundary, a later hit) and replay command."""
    data = copy.deepcopy(report)
    failing = [c for c in data["cases"] if c["verdict"] == "fail"]
    n = 0
    while sum(1 for c in data["cases"] if c["verdict"] == "fail") < total:
        source = failing[n % len(failing)]
        n += 1
        case = copy.deepcopy(source)
        case["id"] = f"{source['id'].rsplit('#', 1)[0]}#{n + 1}"
        case["replay"] = source["replay"].replace(source["id"], case["id"])
        data["cases"].append(case)
        data["plan"]["cases"].append(case["id"])
    data["summary"]["cases"] = len(data["cases"])
    data["summary"]["failed"] = sum(1 for c in data["cases"] if c["verdict"] == "fail")
    return data


def _median_s(fn: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=pick(15, 2))
    args = parser.parse_args()
    fixture = json.loads(FIXTURE.read_text())
    big = many_failing(fixture, FAILING)
    pictures = [(c["timeline"], c["id"]) for c in fixture["cases"] if c["verdict"] != "pass"]
    render_html(fixture)  # warm up (imports)

    def draw_all() -> None:
        for events, case_id in pictures:
            timeline_svg(events, title=case_id, salt=case_id)

    per_picture = _median_s(draw_all, args.rounds) / len(pictures) * 1e3
    fixture_page = _median_s(lambda: render_html(fixture), args.rounds) * 1e3
    html = render_html(big)
    size = len(html.encode())
    drawn = html.count("<svg")
    big_page = _median_s(lambda: render_html(big), args.rounds) * 1e3
    events = statistics.median(len(e) for e, _ in pictures)
    print(
        f"rounds={args.rounds}; fixture: {len(pictures)} failing cases, ~{events:.0f} events each"
    )
    print(f"timeline picture:          median {per_picture:7.2f} ms per drawn case")
    print(
        f"  ratio to goal:           {per_picture / GOAL_MS:7.2f}  (goal <= 1.00, {GOAL_MS:.0f} ms)"
    )
    print(f"fixture page:              median {fixture_page:7.2f} ms ({len(pictures)} drawn)")
    print(
        f"{FAILING} failing cases page:     median {big_page:7.2f} ms "
        f"({drawn} drawn, {FAILING - drawn} listed; MAX_DRAWN_CASES={MAX_DRAWN_CASES})"
    )
    print(f"  per drawn case:          {big_page / max(drawn, 1):7.2f} ms (whole page / drawn)")
    print(f"  HTML size:               {size:7d} bytes")
    print(f"  ratio to goal:           {size / GOAL_BYTES:7.2f}  (goal <= 1.00, 1 MB)")
    print(f"matplotlib imported:       {'matplotlib' in sys.modules}")


if __name__ == "__main__":
    main()
