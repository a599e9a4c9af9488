"""What a test needs from the machine: a Redis on loopback, a C compiler. Each is a skip
marker naming what to install, so a missing service is a skip that says so, never a pass."""

from __future__ import annotations

import socket

import pytest


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


def _have_fake_clock() -> bool:
    from harness.engine.process._faketime import preload
    from harness.errors import BadInputError

    try:
        preload()
    except BadInputError:
        return False
    return True


needs_redis = pytest.mark.skipif(not redis_up(), reason="Redis is not running on 127.0.0.1:6379")
needs_fake_clock = pytest.mark.skipif(
    not _have_fake_clock(), reason="no C compiler builds the clock preload (apt-get install gcc)"
)


def _pg_server_why() -> str | None:
    from harness.engine.process import _pg_cluster

    return _pg_cluster.unavailable()


needs_pg_binaries = pytest.mark.skipif(
    _pg_server_why() is not None,
    reason=f"no throwaway PostgreSQL server: {_pg_server_why()} (apt-get install postgresql)",
)


def _redis_server_why() -> str | None:
    from harness.engine.process import _redis_server

    return _redis_server.unavailable()


needs_redis_server = pytest.mark.skipif(
    _redis_server_why() is not None, reason=f"no Redis broker to start: {_redis_server_why()}"
)
