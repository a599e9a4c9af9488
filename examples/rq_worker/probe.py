"""Settle probe: exit 0 when RQ holds nothing for this case (``python -m ...probe``).

Prints what is pending, which the report keeps as evidence."""

import sys

from examples.rq_worker.app import pending
from harness.worker_config import WorkerConfig

if __name__ == "__main__":
    counts = pending(WorkerConfig.from_env())
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    sys.exit(1 if any(counts.values()) else 0)
