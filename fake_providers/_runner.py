"""Run one fake provider in this process until SIGTERM/SIGINT (both CLIs end up here).

Binds the HTTP server (and the preset's own listener, e.g. SMTP), hands the ready
information (URL, pid, extra ports; never a secret) to ``on_ready`` once everything
listens, serves, and closes the log on the way out.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from fake_providers._app import ProviderApp
from fake_providers._credentials import (
    ADMIN_TOKEN_ENV,
    CREDENTIALS_ENV,
    SECRET_ENV,
    Credential,
    forget_env,
    new_secret,
    parse_credentials,
    read_secrets_fd,
)
from fake_providers._effect_log import EffectLog
from fake_providers._errors import ProviderError
from fake_providers._heartbeat import Beat
from fake_providers._presets import get_preset
from fake_providers._server import build_server, check_host, is_loopback, server_url


@dataclass(frozen=True)
class Secrets:
    """Worker credentials and the admin token, and which of them were invented here."""

    credentials: dict[str, Credential]
    admin_token: str
    invented_credentials: bool
    invented_admin_token: bool


def load_secrets(
    *,
    default_scope: Sequence[str] = ("*",),
    secret: str | None = None,
    admin_token: str | None = None,
    secrets_fd: int | None = None,
) -> Secrets:
    """Secrets from an inherited pipe, the environment (then removed from it), fixed ones,
    or invented ones.

    ``secrets_fd`` is the pipe ``ProviderProcess`` writes the credentials and the admin
    token to (``read_secrets_fd``): what a harness uses, because an environment variable
    stays readable in ``/proc/<pid>/environ`` for the process's whole life, by any process
    of the same user (a worker under test, too). ``secret`` fixes the ``default``
    credential's secret and ``admin_token`` the admin token (``providers serve
    --secret/--admin-token`` or their files, already validated): a human who restarts the
    provider keeps the same ones. An invented secret must be shown to the human who started
    us (nobody else knows it).
    """
    raw_credentials = os.environ.get(CREDENTIALS_ENV)
    from_env = os.environ.get(ADMIN_TOKEN_ENV)
    # gone from /proc/<pid>/environ too, for the rest of this process's life
    forget_env((CREDENTIALS_ENV, ADMIN_TOKEN_ENV, SECRET_ENV))
    if secrets_fd is not None:
        raw_credentials, from_env = read_secrets_fd(secrets_fd)
    admin_token = admin_token or from_env
    if raw_credentials and secret:
        raise ProviderError(
            f"--secret and {CREDENTIALS_ENV} both name the worker credentials; give one"
        )
    if raw_credentials:
        credentials = parse_credentials(raw_credentials)
    else:
        credentials = {
            "default": Credential("default", secret or new_secret(), tuple(default_scope))
        }
    if admin_token is not None and any(c.secret == admin_token for c in credentials.values()):
        raise ProviderError("the admin token must differ from every worker secret")
    return Secrets(
        credentials=credentials,
        admin_token=admin_token or new_secret(),
        invented_credentials=not raw_credentials and not secret,
        invented_admin_token=not admin_token,
    )


def exposure_warning(host: str, ready: Mapping[str, Any]) -> str:
    """What serving beyond loopback exposes, said once on stderr (never a secret)."""
    smtp = ready.get("smtp_port")
    also = f", and SMTP with plaintext AUTH on port {smtp}" if smtp else ""
    return (
        f"WARNING: the fake provider is serving on {host} ({ready['url']}{also}), not only on"
        " loopback: anyone who can reach this host can send through it with a credential,"
        " read its effect log with the admin token, and the fake does whatever a test asks."
    )


def open_effect_log(path: Path, *, durable: bool = True) -> EffectLog:
    """The effect log at ``path``, or a ``ProviderError`` naming it (one line, exit 2 at the
    command line): a device (``/dev/null``), a folder, ``/proc`` or a missing folder is
    refused here, before the provider listens, never a SQLite traceback."""
    if durable:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise ProviderError(f"effect log {_shown(path)}: {exc.strerror}") from None
        if mode is not None and not stat.S_ISREG(mode):
            raise ProviderError(
                f"effect log {_shown(path)}: not a regular file (expected a SQLite file or a new"
                " path)"
            )
    try:
        return EffectLog(path, durable=durable)
    except sqlite3.Error as exc:
        raise ProviderError(
            f"effect log {_shown(path)}: cannot open it as a SQLite file ({exc})"
        ) from None


def _beat_in_loop(server: Any, beat: Beat) -> None:
    """Beat on every turn of ``serve_forever`` (its ``service_actions`` hook, called after
    each poll of at most ``poll_interval``): the beat stops when the loop that accepts
    requests stops, whatever else in the process still runs."""
    own = server.service_actions

    def turn() -> None:
        own()
        beat()

    server.service_actions = turn


def _shown(path: Path) -> str:
    """A path as a one-line message shows it: an over-long one is cut and counted."""
    text = str(path)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def run_provider(
    *,
    preset: str,
    options: Mapping[str, object] | None,
    log_path: Path,
    host: str,
    port: int,
    credentials: Mapping[str, Credential],
    admin_token: str,
    on_ready: Callable[[dict[str, Any]], None],
    durable: bool = True,
    allow_non_loopback: bool = False,
    browse_open: bool = False,
    heartbeat_fd: int | None = None,
) -> int:
    """Serve until a stop signal; returns the exit status (0).

    ``heartbeat_fd``: a pipe the serving loop beats on while it turns
    (``fake_providers._heartbeat``), so whoever started the provider notices in seconds
    that it stopped answering (a SIGSTOP, a debugger, a stuck loop), not after time-outs.

    ``browse_open`` serves the browse page (``/_browse``) without the admin token; it is
    refused unless ``host`` is loopback, whatever ``allow_non_loopback`` says, because the
    page shows every message the provider received.
    """
    check_host(host, allow_non_loopback=allow_non_loopback)
    if browse_open and not is_loopback(host):
        raise ProviderError(
            f"--browse opens the browse page without the admin token, so it is allowed on"
            f" loopback only, not on {host!r}; drop --browse and open"
            " /_browse?token=<admin token> instead"
        )
    spec = get_preset(preset)
    resolved = spec.resolve(options)
    log = open_effect_log(log_path, durable=durable)
    try:
        app = ProviderApp(
            spec=spec,
            options=resolved,
            log=log,
            credentials=credentials,
            admin_token=admin_token,
            browse_open=browse_open,
        )
        server = build_server(app, host=host, port=port, allow_non_loopback=allow_non_loopback)
        try:
            extra = app.start(host)
            stopping = threading.Event()

            def on_signal(_signum: int, _frame: FrameType | None) -> None:
                # shutdown() blocks until serve_forever returns, and serve_forever runs in
                # this (the main) thread, so ask for it from another thread.
                if not stopping.is_set():
                    stopping.set()
                    threading.Thread(target=server.shutdown, daemon=True).start()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
            ready = {"url": server_url(server), "pid": os.getpid(), **extra}
            if not is_loopback(host):
                print(exposure_warning(host, ready), file=sys.stderr, flush=True)
            if heartbeat_fd is not None:
                _beat_in_loop(server, Beat(heartbeat_fd))
            on_ready(ready)
            server.serve_forever(poll_interval=0.01)
        finally:
            app.close()
            server.server_close()
    finally:
        log.close()
    return 0
