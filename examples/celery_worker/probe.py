"""The settle probe and the teardown hook, read straight from Redis (``celery inspect``
waits a second for replies). Every key of a case carries its Kombu prefix.

- ``pending``: the case's queue list and Kombu's ``unacked`` hash (messages delivered to a
  worker and not yet acknowledged: running, prefetched, or stranded by a dead worker);
- ``teardown``: delete every key under the prefix (the queue, ``unacked``,
  ``unacked_index``, ``unacked_mutex`` and the ``_kombu.binding*`` keys).
"""

from redis import Redis

from examples.celery_worker.app import REDIS_URL, key_prefix
from harness import WorkerConfig


def pending(config: WorkerConfig) -> dict[str, int]:
    prefix = key_prefix(config)
    with Redis.from_url(REDIS_URL) as redis:
        queued = redis.llen(f"{prefix}deliveries-{config.case_key}")
        return {"queued": int(queued), "unacked": int(redis.hlen(prefix + "unacked"))}


def teardown(config: WorkerConfig) -> None:
    with Redis.from_url(REDIS_URL) as redis:
        for key in redis.scan_iter(match=key_prefix(config) + "*", count=500):
            redis.delete(key)
