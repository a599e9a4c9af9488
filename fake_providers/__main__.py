"""Command line: ``python -m fake_providers serve --preset NAME --port 0 --log PATH``.

This is the process ``ProviderProcess`` starts. It prints exactly one JSON line on stdout
once it is listening (``{"url": ..., "pid": ...}`` plus e.g. ``"smtp_port"``, never a
secret) so the parent can wait for readiness without polling, and it exits cleanly on
SIGTERM/SIGINT. ``ProviderProcess`` hands the secrets over on an inherited pipe
(``--secrets-fd N``), never in the environment, which stays readable in
``/proc/<pid>/environ`` by every process of the same user, a worker under test included.
Run by hand, the environment variables still work; without them it invents a credential
and an admin token and shows them once on stderr. For humans,
``crash-harness providers serve`` is friendlier (one flag per option).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fake_providers._errors import ProviderError
from fake_providers._options import parse_assignment
from fake_providers._presets import PRESETS
from fake_providers._runner import load_secrets, run_provider
from fake_providers._server import check_host

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
    serve.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set one preset option (repeatable)",
    )
    serve.add_argument("--options-json", default=None, help="preset options as a JSON object")
    serve.add_argument(
        "--identify",
        action="append",
        default=[],
        metavar="FIELD=SOURCE",
        help="where run/destination/delivery/recognizer are read from (repeatable)",
    )
    serve.add_argument(
        "--secrets-fd",
        type=int,
        default=None,
        metavar="FD",
        help="read the credentials and admin token from this inherited pipe (one JSON line)",
    )
    serve.add_argument(
        "--heartbeat-fd",
        type=int,
        default=None,
        metavar="FD",
        help="beat on this inherited pipe while serving (how a harness tells a stopped provider)",
    )
    serve.add_argument("--no-log", action="store_true", help=argparse.SUPPRESS)
    serve.add_argument("--allow-non-loopback", action="store_true", help=argparse.SUPPRESS)
    return parser


def _options(args: argparse.Namespace) -> dict[str, object]:
    options: dict[str, object] = {}
    if args.options_json:
        try:
            given = json.loads(args.options_json)
        except json.JSONDecodeError as exc:
            raise ProviderError(f"--options-json is not valid JSON ({exc.msg})") from None
        if not isinstance(given, dict):
            raise ProviderError("--options-json must be a JSON object")
        options.update(given)
    for text in args.option:
        name, value = parse_assignment(text)
        options[name] = value
    if args.window_s is not None:
        options["window_s"] = args.window_s
    if args.identify:
        options["identify"] = list(args.identify)
    return options


def _announce(ready: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    # Nothing else goes to stdout: point it at /dev/null so a closed pipe can't hurt us.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def serve(args: argparse.Namespace) -> int:
    """Bind, announce readiness on stdout, serve until a stop signal, close the log."""
    check_host(args.host, allow_non_loopback=args.allow_non_loopback)
    options = _options(args)
    PRESETS[args.preset].resolve(options)  # bad options: one line before anything else
    secrets = load_secrets(secrets_fd=args.secrets_fd)
    invented: list[str] = []
    if secrets.invented_credentials:
        for cred in secrets.credentials.values():
            scope = ",".join(cred.scope)
            invented.append(
                f"  credential {cred.credential_id!r} (scope {scope}):"
                f" Authorization: Bearer {cred.secret}"
            )
    if secrets.invented_admin_token:
        invented.append(f"  admin token: X-Admin-Token: {secrets.admin_token}")
    if invented:
        # The only place a secret is ever printed: for a human who started us by hand.
        lines = ["fake_providers: no secrets in the environment, generated these:", *invented]
        print("\n".join(lines), file=sys.stderr, flush=True)
    return run_provider(
        preset=args.preset,
        options=options,
        log_path=args.log,
        host=args.host,
        port=args.port,
        credentials=secrets.credentials,
        admin_token=secrets.admin_token,
        on_ready=_announce,
        durable=not args.no_log,
        allow_non_loopback=args.allow_non_loopback,
        heartbeat_fd=args.heartbeat_fd,
    )


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
