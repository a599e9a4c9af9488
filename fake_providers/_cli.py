"""``crash-harness providers``: run a fake provider on its own, for a human.

``crash-harness providers serve --preset chat --strip-metadata`` starts one provider in the
foreground, prints its URL, its effect log and (only here, for the person at the terminal)
the credential and admin token it generated, and serves until Ctrl-C. Every preset option
is a flag (``--window-s 60``, ``--no-lookup``, ``--decline 'acct_bad*'``); a flag that the
chosen preset does not take is an error, never ignored. ``crash-harness providers list``
shows the presets and their options. ``--secret-file``/``--admin-token-file`` (or
``--secret``/``--admin-token`` and their environment variables) fix the credentials so a
restart keeps them; ``--browse`` opens the browse page
(``/_browse``) without a token, on loopback only.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fake_providers._browse import PATH as BROWSE_PATH
from fake_providers._credentials import (
    ADMIN_TOKEN_ENV,
    MIN_FIXED_LENGTH,
    SECRET_ENV,
    check_fixed,
    not_dumpable,
)
from fake_providers._errors import ProviderError
from fake_providers._identify import Identify
from fake_providers._options import Option, parse_assignment
from fake_providers._presets import PRESETS, all_options, get_preset
from fake_providers._runner import Secrets, load_secrets, run_provider
from fake_providers._server import is_loopback

EXIT_BAD_INPUT = 2

F = TypeVar("F", bound=Callable[..., Any])


_SHARED_HELP = {
    "window_s": "dedupe window in seconds, on the provider clock",
    "lookup": "serve the lookup-by-key endpoint",
}


def _flag(option: Option, users: list[str]) -> Callable[[F], F]:
    dash = option.name.replace("_", "-")
    text = _SHARED_HELP.get(option.name, option.help) if len(users) > 1 else option.help
    help_text = f"{text} [{', '.join(users)}]"
    if option.kind == "bool":
        return click.option(f"--{dash}/--no-{dash}", option.name, default=None, help=help_text)
    if option.kind == "globs":
        return click.option(f"--{dash}", option.name, multiple=True, metavar="GLOB", help=help_text)
    if option.kind == "identify":
        return click.option(
            f"--{dash}", option.name, multiple=True, metavar="FIELD=SOURCE", help=help_text
        )
    kind: type[Any] = int if option.kind == "int" else float
    return click.option(f"--{dash}", option.name, type=kind, default=None, help=help_text)


def _preset_flags(command: F) -> F:
    for option, users in reversed(list(all_options().values())):
        command = _flag(option, users)(command)
    return command


@click.group(name="providers")
def providers() -> None:
    """Run the fake providers on their own (payments, orders, queue-fifo, chat, smtp, webhook)."""


@providers.command(name="list")
def list_presets() -> None:
    """Show every preset, what it models, and its options with their defaults."""
    for spec in PRESETS.values():
        click.echo(f"{spec.name}: {spec.models}")
        for option in spec.options:
            default: object = list(option.default) if option.kind == "globs" else option.default
            if option.kind == "identify":
                default = str(spec.identify)
            click.echo(f"    {option.flag} ({option.kind}, default {default!r}): {option.help}")


@providers.command(name="serve")
@click.option("--preset", required=True, type=click.Choice(sorted(PRESETS)), help="which one")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="HTTP port (0: any free)",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="a loopback address")
@click.option(
    "--allow-non-loopback",
    is_flag=True,
    help="Serve on a --host that is not loopback (a warning names what that exposes).",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="effect log file (default: a new file in a temporary directory)",
)
@click.option(
    "--scope",
    multiple=True,
    default=("*",),
    show_default=True,
    metavar="GLOB",
    help="destination globs of the generated credential (repeatable)",
)
@click.option(
    "--option",
    "assignments",
    multiple=True,
    metavar="NAME=VALUE",
    help="set a preset option by name (repeatable)",
)
@click.option(
    "--secret",
    envvar=SECRET_ENV,
    default=None,
    metavar="TEXT",
    help=(
        f"fix the 'default' credential's secret instead of a random one (>= {MIN_FIXED_LENGTH}"
        f" printable characters; prefer ${SECRET_ENV}: argv is visible to ps)"
    ),
)
@click.option(
    "--admin-token",
    envvar=ADMIN_TOKEN_ENV,
    default=None,
    metavar="TEXT",
    help=f"fix the admin token (same rules; prefer ${ADMIN_TOKEN_ENV})",
)
@click.option(
    "--secret-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="read the 'default' credential's secret from FILE's first line ('-': stdin); FILE"
    " must not be readable by group or others",
)
@click.option(
    "--admin-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="read the admin token from FILE's first line ('-': stdin); same rules",
)
@click.option(
    "--browse",
    "browse_open",
    is_flag=True,
    help="open the browse page (/_browse) without the admin token; loopback only",
)
@click.option("--no-log", is_flag=True, hidden=True)
@_preset_flags
def serve(
    *,
    preset: str,
    port: int,
    host: str,
    allow_non_loopback: bool,
    log_path: Path | None,
    scope: tuple[str, ...],
    assignments: tuple[str, ...],
    secret: str | None,
    admin_token: str | None,
    secret_file: Path | None,
    admin_token_file: Path | None,
    browse_open: bool,
    no_log: bool,
    **flags: Any,
) -> None:
    """Run one fake provider in the foreground until Ctrl-C."""
    not_dumpable()  # its admin token and audit out of reach of the processes it serves
    secret_from = f"--secret (or {SECRET_ENV})"
    token_from = f"--admin-token (or {ADMIN_TOKEN_ENV})"
    try:
        if str(secret_file) == str(admin_token_file) == "-":
            raise ProviderError("--secret-file and --admin-token-file cannot both read stdin ('-')")
        if secret_file is not None:
            if secret is not None:
                raise ProviderError(f"give --secret-file or --secret (or ${SECRET_ENV}), not both")
            secret = read_secret_file(secret_file, "--secret-file")
            secret_from = f"--secret-file {secret_file}"
        if admin_token_file is not None:
            if admin_token is not None:
                raise ProviderError(
                    f"give --admin-token-file or --admin-token (or ${ADMIN_TOKEN_ENV}), not both"
                )
            admin_token = read_secret_file(admin_token_file, "--admin-token-file")
            token_from = f"--admin-token-file {admin_token_file}"
        if secret is not None:
            check_fixed(secret, secret_from)
        if admin_token is not None:
            check_fixed(admin_token, token_from)
        if browse_open and not is_loopback(host):
            raise ProviderError(
                f"--browse is allowed on a loopback --host only, not {host!r}: it opens every"
                " message received to anyone who can reach the port"
            )
    except ProviderError as exc:
        click.echo(f"crash-harness providers: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    spec = get_preset(preset)
    known = {option.name for option in spec.options}
    options: dict[str, object] = {}
    for name, value in flags.items():
        if value is None or value == ():
            continue
        if name not in known:
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} does not apply to preset {preset!r}")
        options[name] = list(value) if isinstance(value, tuple) else value
    try:
        for text in assignments:
            name, value = parse_assignment(text)
            options[name] = value
        resolved = spec.resolve(options)
    except ProviderError as exc:
        raise click.UsageError(str(exc)) from None
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix=f"fake-{preset}-")) / "effects.sqlite"
    try:
        secrets = load_secrets(default_scope=scope, secret=secret, admin_token=admin_token)
    except ProviderError as exc:
        click.echo(f"crash-harness providers: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)

    def announce(ready: dict[str, Any]) -> None:
        _print_banner(
            spec.name, spec.models, ready, log_path, resolved, secrets, browse_open=browse_open
        )

    try:
        status = run_provider(
            preset=preset,
            options=resolved,
            log_path=log_path,
            host=host,
            port=port,
            credentials=secrets.credentials,
            admin_token=secrets.admin_token,
            on_ready=announce,
            durable=not no_log,
            allow_non_loopback=allow_non_loopback,
            browse_open=browse_open,
        )
    except ProviderError as exc:
        click.echo(f"crash-harness providers: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo("stopped.")
    sys.exit(status)


def read_secret_file(path: Path, flag: str) -> str:
    """The first line of ``path`` (``-``: stdin), for ``--secret-file``/``--admin-token-file``.

    A file is the way to fix a secret that no other process can read later: argv is shown
    by ``ps`` and an environment variable by ``/proc/<pid>/environ``, to every process of
    the same user. So a file that group or others may read is refused (``chmod 600`` it),
    as ssh refuses a readable private key; errors name the flag and the file, never a
    value."""
    try:
        if str(path) == "-":
            line = sys.stdin.readline()
        else:
            with path.open(encoding="utf-8") as handle:
                mode = os.fstat(handle.fileno()).st_mode
                if mode & 0o077:
                    raise ProviderError(
                        f"{flag} {path}: readable by group or others (mode"
                        f" {stat.S_IMODE(mode):04o}); chmod 600 it"
                    )
                line = handle.readline()
    except OSError as exc:
        raise ProviderError(f"{flag} {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProviderError(f"{flag} {path}: not UTF-8 text") from None
    return line.rstrip("\r\n")


def _duration(seconds: float) -> str:
    """``3600.0`` -> ``1 h``, ``300`` -> ``5 min``, ``90`` -> ``90 s``: as a person says it."""
    whole = int(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g} s"
    if whole % 3600 == 0:
        return f"{whole // 3600} h"
    if whole % 60 == 0:
        return f"{whole // 60} min"
    return f"{whole} s"


def dedupe_summary(options: dict[str, Any]) -> str:
    """The dedupe window the provider really runs with, from the resolved options (so the
    banner follows --window-s, not the preset's default)."""
    if "window_s" not in options:
        return "none (every accepted message is a new one)"
    if options.get("dedupe") is False:
        return "off (--no-dedupe: every delivery is processed)"
    window = float(options["window_s"])
    return f"a key is remembered {_duration(window)} ({window:g} s on the provider clock)"


def _print_banner(
    name: str,
    models: str,
    ready: dict[str, Any],
    log_path: Path,
    options: dict[str, Any],
    secrets: Secrets,
    *,
    browse_open: bool = False,
) -> None:
    """What a human needs to talk to the provider; the only place a secret is printed (and
    only one we invented: a secret the human chose is never echoed)."""
    shown = " ".join(
        f"{k}={','.join(v) if isinstance(v, tuple) else v}"
        for k, v in options.items()
        if not (k == "identify" and v == Identify())  # shown on its own line when set
    )
    lines = [
        f"fake provider {name!r} listening on {ready['url']}",
        f"  models:     {models}",
    ]
    if "smtp_port" in ready:
        host = str(ready["url"]).split("//", 1)[1].rsplit(":", 1)[0]
        lines.append(f"  smtp:       {host}:{ready['smtp_port']} (AUTH PLAIN/LOGIN, no TLS)")
    lines += [
        f"  effect log: {log_path}",
        f"  options:    {shown or '(none)'}",
        f"  dedupe:     {dedupe_summary(options)}",
    ]
    if options.get("open"):
        lines.append(
            "  open:       every request is accepted without a credential"
            " (for an internal endpoint; the credential below is not needed)"
        )
    if options.get("identify", Identify()) != Identify():
        lines.append(f"  identify:   {options['identify']} (other fields: the preset's defaults)")
    for cred in secrets.credentials.values():
        scope = ",".join(cred.scope)
        if not secrets.invented_credentials:
            given = "the one you set" if cred.credential_id == "default" else "from env"
            if "smtp_port" in ready:
                lines.append(
                    f"  credential: username {cred.credential_id!r}, password: {given}"
                    f" (scope {scope}; HTTP: Authorization: Bearer <password>)"
                )
            else:
                lines.append(
                    f"  credential: {cred.credential_id!r} (scope {scope}):"
                    f" Authorization: Bearer <{given}>"
                )
        elif "smtp_port" in ready:
            lines.append(
                f"  credential: username {cred.credential_id!r}, password {cred.secret}"
                f" (scope {scope}; HTTP: Authorization: Bearer <password>)"
            )
        else:
            lines.append(
                f"  credential: {cred.credential_id!r} (scope {scope}):"
                f" Authorization: Bearer {cred.secret}"
            )
    if secrets.invented_admin_token:
        lines.append(f"  admin:      X-Admin-Token: {secrets.admin_token}")
        token = secrets.admin_token
    else:
        lines.append("  admin:      X-Admin-Token: <the one you set>")
        token = "<admin token>"
    if browse_open:
        lines.append(f"  browse:     {ready['url']}{BROWSE_PATH} (open: no token on loopback)")
    else:
        lines.append(f"  browse:     {ready['url']}{BROWSE_PATH}?token={token}")
    lines.append("Ctrl-C to stop.")
    click.echo("\n".join(lines))
    sys.stdout.flush()
