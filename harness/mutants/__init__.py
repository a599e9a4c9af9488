"""The catalogue of broken workers: each one real mistake, each a small diff on the reference.

The harness must flag every mutant with its ``expected_violation`` and flag nothing on the
reference; ``tests/test_mutants.py`` holds it to that.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.mutants import ack_before_send, new_key_per_attempt, transcript_rebuild
from harness.systems import System

CATALOGUE: dict[str, Callable[[], System]] = {
    "ack_before_send": ack_before_send.system,
    "new_key_per_attempt": new_key_per_attempt.system,
    "transcript_rebuild": transcript_rebuild.system,
}
