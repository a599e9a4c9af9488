"""fake_providers: out-of-process fake providers with a durable effect log.

The crash harness kills delivery workers and then counts what the providers *actually
received*; these fakes are the providers. Each runs as its own process (so it survives the
workers it judges), logs every request to SQLite before replying, and can inject faults such
as accepting a message and then cutting the connection before the reply. Six presets follow
real providers' documented semantics (``docs/providers.md``): ``payments`` (Stripe),
``orders`` (PayPal), ``queue-fifo`` (SQS FIFO), ``chat`` (Slack/forums), ``smtp`` (a real
SMTP server with AUTH) and ``webhook`` (Standard Webhooks).

What lives where:

- ``_process``: ``ProviderProcess``, start/stop/kill/restart a provider subprocess.
- ``_client``: ``AdminClient``, read the effect log and steer faults, epochs and the clock.
- ``_records``: ``Effect`` (one log record) and ``FaultRule``, shared by server and client.
- ``_errors``: ``ProviderError`` and ``ProviderStartError``.
- ``_identify``: ``Identify``, the rule that reads run, destination and the user's own id
  from each request (JSON pointer, header, path template, SMTP envelope, regex).
- ``__main__``: ``python -m fake_providers serve ...``, the server process entry point.
- ``_cli``: ``crash-harness providers serve|list``, the same for a human at a terminal.
- ``_runner``: run one provider in this process (secrets, listeners, signals).
- ``_server``: werkzeug threaded server on loopback (TCP_NODELAY, no access log).
- ``_app``: the shared core every preset plugs into (auth, scopes, log, faults, admin API),
  wiring its rooms: ``_routing`` (URL rules; a reply sent or its connection cut),
  ``_epochs`` (the case epoch in the path), ``_admin`` and ``_browse_gate`` (the admin API,
  the browse page's login), ``_holds`` (far-side crash points), ``_flights`` (requests in
  flight and the waits on them), ``_faults``, ``_mint`` (replayable ids),
  ``_provider_clock``, ``_bearer``, ``_attempt`` (what a request is recognised as),
  ``_reply``, and ``_message`` (the worker pipeline of every ``MessagePreset``).
- ``_preset``: ``Preset`` and ``PresetSpec``; ``_message_preset``: ``MessagePreset`` and the
  ``Incoming`` send its hooks are handed.
- ``presets/``: one module per preset: its semantics and nothing else.
- ``_presets``: the registry of presets; ``_options``: per-instance preset options.
- ``_effect_log``: the append-only SQLite log (WAL, committed before every reply).
- ``_credentials``: credential parsing, env var names, constant-time secret checks.
"""

from fake_providers._body import body_hash, body_normal_form
from fake_providers._client import AdminClient, reason_of
from fake_providers._errors import ProviderError, ProviderStartError
from fake_providers._identify import Identify
from fake_providers._process import ProviderProcess
from fake_providers._records import Effect, FaultRule

__all__ = [
    "AdminClient",
    "Effect",
    "FaultRule",
    "Identify",
    "ProviderError",
    "ProviderProcess",
    "ProviderStartError",
    "body_hash",
    "body_normal_form",
    "reason_of",
]
