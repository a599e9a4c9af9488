"""Command line: ``python -m fake_providers serve --preset payments --port 0 --log PATH``.

This is the process ``ProviderProcess`` starts. It prints exactly one JSON line on stdout
once it is listening (``{"url": ..., "pid": ...}``, never a secret) so the parent can wait
for readiness without polling, and it exits cleanly on SIGTERM/SIGINT. Secrets arrive via
environment variables only; run by hand without them, it invents a credential and an
admin token and shows them once on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from fake_providers._app import ProviderApp
from fake_providers._credentials import (
    ADMIN_TOKEN_ENV,
    CREDENTIALS_ENV,
    Credential,
    new_secret,
    parse_credentials,
)
from fake_providers._effect_log import EffectLog
from fake_providers._errors import ProviderError
from fake_providers._presets import PRESETS, get_preset
from fake_providers._server import build_server, check_host, server_url

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fake_providers")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run one fake provider until SIGTERM/SIGINT")
    serve.add_argument("--preset", default="payments", choices=sorted(PRESETS))
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--log", type=Path, required=True, help="SQLite effect log path")
    serve.add_argument("--window-s", type=float, default=None, help="override dedupe window")
    serve.add_argument("--allow-non-loopback", action="store_true", help=argparse.SUPPRESS)
    return parser


def _load_secrets() -> tuple[dict[str, Credential], str]:
    """Read secrets from the env (then drop them from it); invent them if absent."""
    raw_credentials = os.environ.pop(CREDENTIALS_ENV, None)
    admin_token = os.environ.pop(ADMIN_TOKEN_ENV, None)
    invented: list[str] = []
    if raw_credentials:
        credentials = parse_credentials(raw_credentials)
    else:
        secret = new_secret()
        credentials = {"default": Credential("default", secret, ("*",))}
        invented.append(f"  credential 'default' (scope *): Authorization: Bearer {secret}")
    if not admin_token:
        admin_token = new_secret()
        invented.append(f"  admin token: X-Admin-Token: {admin_token}")
    if invented:
        # The only place a secret is ever printed: for a human who started us by hand.
        lines = ["fake_providers: no secrets in the environment, generated these:", *invented]
        print("\n".join(lines), file=sys.stderr, flush=True)
    return credentials, admin_token


def serve(args: argparse.Namespace) -> int:
    """Bind, announce readiness on stdout, serve until a stop signal, close the log."""
    check_host(args.host, allow_non_loopback=args.allow_non_loopback)
    preset = get_preset(args.preset).with_window(args.window_s)
    credentials, admin_token = _load_secrets()
    log = EffectLog(args.log)
    try:
        app = ProviderApp(preset=preset, log=log, credentials=credentials, admin_token=admin_token)
        server = build_server(
            app, host=args.host, port=args.port, allow_non_loopback=args.allow_non_loopback
        )
        stopping = threading.Event()

        def on_signal(_signum: int, _frame: FrameType | None) -> None:
            # shutdown() blocks until serve_forever returns, and serve_forever runs in this
            # (the main) thread, so ask for it from another thread.
            if not stopping.is_set():
                stopping.set()
                threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        ready = {"url": server_url(server), "pid": os.getpid()}
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        # Nothing else goes to stdout: point it at /dev/null so a closed pipe can't hurt us.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        server.serve_forever(poll_interval=0.1)
    finally:
        log.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = _parser().parse_args(argv)
    try:
        return serve(args)
    except ProviderError as exc:
        print(f"fake_providers: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
