"""Cost of a disarmed ``boundary()`` call against an empty function call (goal: <= 2x).

Production code keeps its boundary() calls, so the disarmed path must be nearly free.
Prints the median of several timeit repeats for each, and their ratio, measured in one run.
"""

from __future__ import annotations

import statistics
import timeit

from _quick import pick

from harness import boundary

N = pick(1_000_000, 10_000)
REPEATS = pick(15, 3)


def empty(name: str) -> None:
    return None


def main() -> None:
    t_empty = timeit.repeat(lambda: None, number=1, repeat=1)  # warm-up
    del t_empty
    empty_runs = timeit.repeat("f('after_claim')", globals={"f": empty}, number=N, repeat=REPEATS)
    bound_runs = timeit.repeat(
        "f('after_claim')", globals={"f": boundary}, number=N, repeat=REPEATS
    )
    e = statistics.median(empty_runs) / N * 1e9
    b = statistics.median(bound_runs) / N * 1e9
    print(f"empty function call:   median {e:6.1f} ns")
    print(f"disarmed boundary():   median {b:6.1f} ns")
    print(f"ratio boundary/empty:  {b / e:.2f}x  (goal <= 2.0x)")


if __name__ == "__main__":
    main()
