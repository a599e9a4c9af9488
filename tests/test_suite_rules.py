"""The suite's own rules, checked on its source: no test asserts an upper bound on a duration,
and no test binds a fixed port.

Both held on an idle machine and failed on a busy CI runner (``took < 30`` read 35.7 s under
load; port 2525 was taken by another run). Durations belong to ``benchmarks/``; a test that
must show something did not wait uses evidence (a note, an order of events, a bound the
product cannot reach by waiting). A lower bound stays allowed: load only lengthens a wait.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: calls whose result is a reading of a clock
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns"}
#: report fields that are measured durations
DURATION_KEYS = {"duration_s", "elapsed_s", "took_s", "seconds"}


def _is_clock_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _timed_names(tree: ast.AST) -> set[str]:
    """Names assigned a clock difference (``took = time.monotonic() - began``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.BinOp)
            and any(_is_clock_call(n) for n in ast.walk(node.value))
        ):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _is_duration(node: ast.AST, timed: set[str]) -> bool:
    for sub in ast.walk(node):
        if _is_clock_call(sub) or (isinstance(sub, ast.Name) and sub.id in timed):
            return True
        if (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.slice, ast.Constant)
            and sub.slice.value in DURATION_KEYS
        ):
            return True
    return False


def duration_asserts(source: str) -> list[int]:
    """Lines of ``assert``s that bound a duration from above (``took < 30``, ``30 > took``)."""
    tree = ast.parse(source)
    timed = _timed_names(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
            continue
        operands = [node.test.left, *node.test.comparators]
        for i, op in enumerate(node.test.ops):
            left, right = operands[i], operands[i + 1]
            upper = (isinstance(op, (ast.Lt, ast.LtE)) and _is_duration(left, timed)) or (
                isinstance(op, (ast.Gt, ast.GtE)) and _is_duration(right, timed)
            )
            if upper:
                found.append(node.lineno)
                break
    return found


def _port(node: ast.AST) -> int | None:
    """A literal that could be a port to listen on (1..65535), else None."""
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 65535:
        return value
    return None


def fixed_port_binds(source: str) -> list[int]:
    """Lines that listen on a fixed port: ``sock.bind((host, 2525))``, or ``--port 8025`` /
    ``--smtp-port 2525`` in a command line the test runs (0 is "any free port")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "bind"
            and node.args
            and isinstance(node.args[0], ast.Tuple)
            and len(node.args[0].elts) == 2
            and _port(node.args[0].elts[1]) is not None
        ):
            found.append(node.lineno)
        if isinstance(node, (ast.List, ast.Tuple)):
            words = node.elts
            for flag, value in itertools.pairwise(words):
                if (
                    isinstance(flag, ast.Constant)
                    and flag.value in ("--port", "--smtp-port")
                    and _port(value) is not None
                ):
                    found.append(node.lineno)
    return found


def test_no_test_asserts_a_duration_or_binds_a_fixed_port() -> None:
    broken = []
    for path in sorted(TESTS.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        broken += [f"{path.name}:{n}: asserts a duration" for n in duration_asserts(source)]
        broken += [f"{path.name}:{n}: binds a fixed port" for n in fixed_port_binds(source)]
    assert not broken, "\n".join(broken)


def test_the_rules_see_what_they_are_for() -> None:
    """Each rule flags the shapes it was written for, and lets the allowed ones pass."""
    assert duration_asserts(
        "began = time.monotonic()\ntook = time.monotonic() - began\nassert took < 30\n"
    ) == [3]
    assert duration_asserts("assert time.monotonic() - started < 10\n") == [1]
    assert duration_asserts("assert case['duration_s'] < 30, case\n") == [1]
    assert duration_asserts("assert 30 > case['duration_s']\n") == [1]
    assert duration_asserts("assert time.monotonic() - started >= 0.2\n") == []  # lower bound
    assert duration_asserts("assert len(x) < 30\n") == []
    assert fixed_port_binds("s.bind(('127.0.0.1', 2525))\n") == [1]
    assert fixed_port_binds("s.bind(('127.0.0.1', 0))\n") == []
    assert fixed_port_binds("run(['serve', '--smtp-port', '2525'])\n") == [1]
    assert fixed_port_binds("run(['serve', '--port', '70000'])\n") == []  # no port: refused
    assert fixed_port_binds("run(['serve', '--port', '0'])\n") == []
