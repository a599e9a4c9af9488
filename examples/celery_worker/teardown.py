"""Teardown hook: delete every Redis key of this case (``python -m ...teardown``).

Kombu writes them all under the case's ``global_keyprefix``: the queue, ``unacked``,
``unacked_index``, ``unacked_mutex`` and the ``_kombu.binding*`` keys. Run it once the
worker has stopped; prints how many keys it deleted."""

from redis import Redis

from examples.celery_worker.app import REDIS_URL, key_prefix
from harness.worker_config import WorkerConfig


def teardown(config: WorkerConfig) -> int:
    with Redis.from_url(REDIS_URL) as redis:
        keys = list(redis.scan_iter(match=key_prefix(config) + "*", count=500))
        return int(redis.delete(*keys)) if keys else 0


if __name__ == "__main__":
    print(f"deleted {teardown(WorkerConfig.from_env())} keys")
