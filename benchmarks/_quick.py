"""The quick form of every benchmark: the same code on a few rounds, so CI runs it and it
cannot rot (``CRASH_HARNESS_BENCH_QUICK=1``, as ``make bench-quick`` and the test suite set).

Its figures are too few to quote; ``make bench`` gives the ones to quote.
"""

from __future__ import annotations

import os

QUICK = os.environ.get("CRASH_HARNESS_BENCH_QUICK", "") == "1"


def pick(full: int, quick: int) -> int:
    """``full`` normally, ``quick`` in the quick form."""
    return quick if QUICK else full
