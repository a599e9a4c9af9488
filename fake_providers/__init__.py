"""fake_providers: out-of-process fake HTTP providers with a durable effect log.

The crash harness kills delivery workers and then counts what the providers *actually
received*; these fakes are the providers. Each runs as its own process (so it survives the
workers it judges), logs every request to SQLite before replying, and can inject faults such
as accepting a message and then cutting the connection before the reply.

What lives where:

- ``_process``: ``ProviderProcess``, start/stop/kill/restart a provider subprocess.
- ``_client``: ``AdminClient``, read the effect log and steer faults, epochs and the clock.
- ``_records``: ``Effect`` (one log record) and ``FaultRule``, shared by server and client.
- ``_errors``: ``ProviderError`` and ``ProviderStartError``.
- ``__main__``: ``python -m fake_providers serve ...``, the server process entry point.
- ``_server``: werkzeug threaded server on loopback (TCP_NODELAY, no access log).
- ``_app``: the WSGI app, i.e. the HTTP contract (worker API and admin API).
- ``_effect_log``: the append-only SQLite log (WAL, synchronous=FULL).
- ``_presets``: per-kind behaviour (dedupe window, lookup); only ``payments`` so far.
- ``_credentials``: credential parsing, env var names, constant-time secret checks.
"""

from fake_providers._client import AdminClient
from fake_providers._errors import ProviderError, ProviderStartError
from fake_providers._process import ProviderProcess
from fake_providers._records import Effect, FaultRule

__all__ = [
    "AdminClient",
    "Effect",
    "FaultRule",
    "ProviderError",
    "ProviderProcess",
    "ProviderStartError",
]
