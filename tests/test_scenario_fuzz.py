"""Mutated scenario files get a one-line error that names the file, or load into values the
harness can run with: never a traceback, never a value it should have refused.

Hypothesis mutates the built-in scenario files at the text level (a value replaced by a
hostile one, a line dropped or doubled, a byte that is not UTF-8, a value nested hundreds or
thousands of levels deep, a value megabytes long) and loads each result.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.engine.plan import scenario as scenario_mod
from harness.errors import BadInputError

BUILTINS = scenario_mod.builtin_paths()
#: values a careless or hostile file might hold, as TOML source text
NASTY = (
    "nan",
    "-nan",
    "inf",
    "-inf",
    "1e308",
    "1e999",
    "-1",
    "-0.5",
    "0",
    "0.0",
    "1",
    "2",
    "7",
    "99999999999999999999",
    "-90000",
    '""',
    '"x"',
    '"é"',
    "[]",
    "[[1]]",
    "[1e308]",
    "[-1]",
    "[nan]",
    "[0]",
    "{}",
    "{ a = 1 }",
    "true",
    "false",
    "1979-05-27",
    '"all"',
    '["all"]',
    '"exactly_once_effect"',
    '"crash@after_claim#99"',
    '["crash@after_claim#1:nan"]',
    '["provider_5xx:99999999999999999999"]',
    '["concurrent_claim:100000"]',
    '["clock_jump@before_retry#1:-3d"]',
    '["provider_slow:inf"]',
    '["crash@nowhere#1"]',
    '"/proc/self/mem"',
    '"/dev/null"',
    '"' + "a" * 5000 + '"',
)
#: how deep a nested value goes: a few levels past what a scenario may hold, a few hundred
#: (which the TOML reader takes), and past its recursion limit (a 2.4 KB file at 1,200)
DEPTHS = (2, 9, 60, 300, 1200, 5000)


def _nested(depth: int, kind: str) -> str:
    """An array (or inline table) ``depth`` levels deep, as TOML source text."""
    if kind == "array":
        return "[" * depth + "]" * depth
    return "{ a = " * depth + "1" + " }" * depth


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(BUILTINS))
    lines = path.read_text().splitlines()
    assignments = [i for i, ln in enumerate(lines) if "=" in ln and not ln.lstrip().startswith("#")]
    how = draw(st.sampled_from(["value", "value", "value", "drop", "double", "byte", "deep"]))
    if how == "value" and assignments:
        i = draw(st.sampled_from(assignments))
        key = lines[i].split("=", 1)[0]
        lines[i] = f"{key}= {draw(st.sampled_from(NASTY))}"
    elif how == "deep" and assignments:
        i = draw(st.sampled_from(assignments))
        key = lines[i].split("=", 1)[0]
        kind = draw(st.sampled_from(["array", "table"]))
        lines[i] = f"{key}= {_nested(draw(st.sampled_from(DEPTHS)), kind)}"
    elif how == "drop" and lines:
        del lines[draw(st.integers(0, len(lines) - 1))]
    elif how == "double" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
    data = ("\n".join(lines) + "\n").encode()
    if how == "byte":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + b"\xff" + data[at:]
    return path.name, data


def _numbers_in_range(sc: scenario_mod.Scenario) -> list[str]:
    """What no accepted scenario may hold (the checker would blame the system for it)."""
    bad: list[str] = []
    window = sc.provider_window_s
    if window is not None and not (math.isfinite(window) and window >= 0):
        bad.append(f"provider window_s {window}")
    if not (math.isfinite(sc.worker_deadline_s) and sc.worker_deadline_s > 0):
        bad.append(f"deadline_s {sc.worker_deadline_s}")
    for key, value in sc.worker_overrides.items():
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            if isinstance(v, bool):
                continue
            if (
                not math.isfinite(v)
                or v < 0
                or (key in ("lease_s", "request_timeout_s", "max_attempts") and v <= 0)
                or (key.endswith("_s") and v > 366 * 86400)
            ):
                bad.append(f"worker {key} {v}")
    if sc.seed is not None and not 0 <= sc.seed < 2**63:
        bad.append(f"seed {sc.seed}")
    return bad


#: CI's bounded sample; ``make fuzz`` sets more
EXAMPLES = int(os.environ.get("CRASH_HARNESS_FUZZ_EXAMPLES", "150"))
SEEN: Counter[str] = Counter()


def _load_or_refuse(case: tuple[str, bytes]) -> None:
    name, data = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            sc = scenario_mod.load(path)
            sc.checked_system()  # as `scenarios check` and every command do
        except BadInputError as exc:
            message = str(exc)
            assert message.startswith(str(path)), message
            assert "\n" not in message.strip(), message
            SEEN["refused"] += 1
            return
        assert _numbers_in_range(sc) == [], data.decode(errors="replace")
        SEEN["loaded"] += 1


_fuzz = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)(given(mutated())(_load_or_refuse))


def test_a_mutated_scenario_loads_or_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    SEEN.clear()
    _fuzz()
    with capsys.disabled():
        print(
            f"\nscenario fuzz: {SEEN.total()} mutated files: {SEEN['refused']} refused in one"
            f" line naming the file, {SEEN['loaded']} loaded with every number in range;"
            " 0 tracebacks"
        )
    assert SEEN["refused"] > 0
    assert SEEN["loaded"] > 0
