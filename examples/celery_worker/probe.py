"""Settle probe: exit 0 when the broker holds nothing for this case (``python -m ...probe``).

Read from Redis directly (``celery inspect`` waits a second for replies): the case's queue
list and Kombu's ``unacked`` hash (messages delivered to a worker and not yet acknowledged,
whether running, prefetched or stranded by a dead worker). Both keys carry the case's
prefix. Prints what is pending, which the report keeps as evidence."""

import sys

from redis import Redis

from examples.celery_worker.app import REDIS_URL, key_prefix, queue_name
from harness.worker_config import WorkerConfig


def pending(config: WorkerConfig) -> dict[str, int]:
    """What Kombu still holds for this case: messages waiting, and delivered but unacked."""
    prefix = key_prefix(config)
    with Redis.from_url(REDIS_URL) as redis:
        return {
            "queued": int(redis.llen(prefix + queue_name(config))),
            "unacked": int(redis.hlen(prefix + "unacked")),
        }


if __name__ == "__main__":
    counts = pending(WorkerConfig.from_env())
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    sys.exit(1 if any(counts.values()) else 0)
