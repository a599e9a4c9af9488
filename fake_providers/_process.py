"""``ProviderProcess``: run a fake provider as a real subprocess the harness can kill.

Out of process on purpose: the provider must keep its own state (and its durable log) while
workers are SIGKILLed, and tests can SIGKILL the provider itself and restart it on the same
log. Readiness comes from the one JSON line the server prints, read with ``select`` and a
deadline, so a server that dies or hangs at start fails fast with its stderr attached.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

from fake_providers._client import AdminClient
from fake_providers._credentials import (
    ADMIN_TOKEN_ENV,
    CREDENTIALS_ENV,
    SECRET_ENV,
    dump_credentials,
    secrets_message,
)
from fake_providers._errors import ProviderError, ProviderStartError
from fake_providers._identify import Identify
from fake_providers._options import option_json
from fake_providers._presets import get_preset
from fake_providers._server import check_host

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_STDERR_TAIL_BYTES = 8_000
#: secret variables never passed on to a provider's environment
_SECRET_ENVS = frozenset({ADMIN_TOKEN_ENV, CREDENTIALS_ENV, SECRET_ENV})


class ProviderProcess:
    """A running ``python -m fake_providers serve`` subprocess. Use ``ProviderProcess.start``.

    Attributes: ``url``, ``pid``, ``log_path``, ``stderr_path``, ``credentials``
    (``{id: (secret, scope)}``), ``options`` (as given), ``smtp_port`` (the ``smtp``
    preset's SMTP port, else None) and ``admin`` (an ``AdminClient``; replaced on restart).
    """

    url: str
    pid: int
    admin: AdminClient
    smtp_port: int | None = None

    def __init__(
        self,
        *,
        log_path: Path,
        preset: str,
        credentials: Mapping[str, tuple[str, list[str]]],
        admin_token: str,
        window_s: float | None,
        host: str,
        startup_timeout_s: float,
        options: Mapping[str, Any] | None = None,
        durable: bool = True,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self.log_path = Path(log_path)
        self.stderr_path = self.log_path.with_name(self.log_path.name + ".stderr")
        self.preset = preset
        self.credentials: dict[str, tuple[str, list[str]]] = {
            cid: (secret, list(scope)) for cid, (secret, scope) in credentials.items()
        }
        self.window_s = window_s
        self.options: dict[str, Any] = dict(options or {})
        self.durable = durable
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._admin_token = admin_token
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"ProviderProcess({self.preset!r}, url={getattr(self, 'url', None)!r}, {state})"

    @classmethod
    def start(
        cls,
        *,
        log_path: Path,
        preset: str = "payments",
        credentials: dict[str, tuple[str, list[str]]] | None = None,
        window_s: float | None = None,
        startup_timeout_s: float = 15,
        host: str = "127.0.0.1",
        port: int = 0,
        options: Mapping[str, Any] | None = None,
        durable: bool = True,
        identify: Identify | Mapping[str, Any] | Sequence[str] | None = None,
    ) -> ProviderProcess:
        """Start a provider and wait until it is listening.

        ``credentials`` maps credential id to ``(secret, scope globs)``; ``None`` creates one
        random credential ``"worker"`` with scope ``["*"]``. ``options`` are the preset's
        per-instance options (``docs/providers.md``; ``window_s=`` is a shortcut for
        ``options={"window_s": ...}``), validated here before anything starts.
        ``identify`` is the identification rule (``Identify``, ``{field: source}``, or
        ``["field=source", ...]``; a shortcut for ``options={"identify": ...}``): where each
        request's run, destination, delivery (the user's own id) and recognizer are read;
        fields it leaves out keep the preset's defaults (``docs/providers.md``).
        ``durable=False`` keeps the log in memory: for the benchmark only. Raises
        ``ProviderStartError`` (with the server's stderr) if it exits or is not ready within
        ``startup_timeout_s``.
        """
        try:
            spec = get_preset(preset)
            given = dict(options or {})
            if window_s is not None:
                given["window_s"] = window_s
            if identify is not None:
                given["identify"] = Identify.parse(identify)
                options = {**(options or {}), "identify": given["identify"]}
            spec.resolve(given)
            check_host(host)
        except ProviderError as exc:
            raise ProviderStartError(str(exc)) from None
        if credentials is None:
            credentials = {"worker": (secrets.token_urlsafe(32), ["*"])}
        process = cls(
            log_path=log_path,
            preset=preset,
            credentials=credentials,
            admin_token=secrets.token_urlsafe(32),
            window_s=window_s,
            host=host,
            startup_timeout_s=startup_timeout_s,
            options=options,
            durable=durable,
        )
        process._spawn(port)
        return process

    # -- convenience --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """None while the server runs (or before it started), else how it ended: its exit
        status, or minus the signal that killed it (``-9``: SIGKILL)."""
        return None if self._proc is None else self._proc.poll()

    @property
    def port(self) -> int:
        """The TCP port currently (or last) served."""
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def admin_token(self) -> str:
        """The admin token (sent as ``X-Admin-Token``)."""
        return self._admin_token

    def secret(self, credential_id: str = "worker") -> str:
        """The secret of one credential."""
        return self.credentials[credential_id][0]

    def auth_headers(self, credential_id: str = "worker") -> dict[str, str]:
        """``{"Authorization": "Bearer <secret>"}`` for one credential."""
        return {"Authorization": f"Bearer {self.secret(credential_id)}"}

    # -- lifecycle ----------------------------------------------------------------------

    def _spawn(self, port: int, smtp_port: int | None = None) -> None:
        argv = [sys.executable, "-m", "fake_providers", "serve"]
        argv += ["--preset", self.preset, "--port", str(port), "--host", self.host]
        argv += ["--log", str(self.log_path)]
        if self.window_s is not None:
            argv += ["--window-s", repr(float(self.window_s))]
        options = dict(self.options)
        if smtp_port is not None:
            options["smtp_port"] = smtp_port
        if options:
            argv += ["--options-json", json.dumps(options, default=option_json)]
        if not self.durable:
            argv.append("--no-log")
        # The secrets travel on a pipe the server reads once at start-up, never in its
        # environment: /proc/<pid>/environ keeps the initial environment for the process's
        # whole life, readable by any process of the same user (a worker under test too).
        # Secret variables a user exported for a provider of their own are not passed on.
        env = {k: v for k, v in os.environ.items() if k not in _SECRET_ENVS}
        secrets_r, secrets_w = os.pipe()
        argv += ["--secrets-fd", str(secrets_r)]
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.stderr_path.open("ab") as stderr_file:
                stderr_start = stderr_file.tell()
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=stderr_file,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(secrets_r,),
                    preexec_fn=_die_with_parent,
                )
        except BaseException:
            os.close(secrets_w)
            raise
        finally:
            os.close(secrets_r)
        assert proc.stdout is not None
        try:
            _write_secrets(
                secrets_w,
                secrets_message(dump_credentials(self.credentials), self._admin_token),
            )
            ready = self._read_ready_line(proc, proc.stdout)
        except ProviderStartError as exc:
            _reap(proc, kill=True)
            proc.stdout.close()
            raise ProviderStartError(f"{exc}{self._stderr_since(stderr_start)}") from None
        proc.stdout.close()
        self._proc = proc
        self.url = str(ready["url"])
        self.pid = int(ready["pid"])
        self.smtp_port = int(ready["smtp_port"]) if "smtp_port" in ready else None
        self.admin = AdminClient(self.url, self._admin_token)

    def _read_ready_line(self, proc: subprocess.Popen[bytes], stdout: IO[bytes]) -> dict[str, Any]:
        deadline = time.monotonic() + self.startup_timeout_s
        fd = stdout.fileno()
        buffer = b""
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProviderStartError(
                    f"fake provider (pid {proc.pid}) not ready within {self.startup_timeout_s} s"
                )
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                code = proc.wait(timeout=self.stop_timeout_s)
                raise ProviderStartError(f"fake provider exited with status {code} before ready")
            buffer += chunk
        line = buffer.split(b"\n", 1)[0]
        try:
            ready = json.loads(line)
            _ = str(ready["url"]), int(ready["pid"])
        except (ValueError, KeyError, TypeError):
            raise ProviderStartError(f"fake provider printed a bad ready line: {line!r}") from None
        if not isinstance(ready, dict):
            raise ProviderStartError(f"fake provider printed a bad ready line: {line!r}")
        return ready

    def _stderr_since(self, offset: int) -> str:
        try:
            with self.stderr_path.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        text = text[-_STDERR_TAIL_BYTES:].strip()
        return f"\n--- provider stderr ({self.stderr_path}) ---\n{text}" if text else ""

    def stop(self) -> None:
        """SIGTERM, wait, SIGKILL if it lingers; reap it. Safe to call more than once."""
        proc = self._proc
        if proc is not None:
            _reap(proc, kill=False, timeout_s=self.stop_timeout_s)
        if hasattr(self, "admin"):
            self.admin.close()

    def kill(self) -> None:
        """SIGKILL the server (simulating a provider crash) and reap it."""
        proc = self._proc
        if proc is not None:
            _reap(proc, kill=True)

    def restart(self) -> None:
        """Start a new server on the same log (same port if free, else a new one).

        A still-running server is stopped first. ``url``, ``pid`` and ``admin`` change
        (``smtp_port`` too, if the old one was taken).
        """
        old_port, old_smtp_port = self.port, self.smtp_port
        self.stop()
        try:
            self._spawn(old_port, old_smtp_port)
        except ProviderStartError:
            self._spawn(0, None if old_smtp_port is None else 0)

    def __enter__(self) -> ProviderProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _write_secrets(fd: int, message: bytes) -> None:
    """Write the secrets message to the server's pipe and close our end; a server that died
    before reading it is reported by the ready-line wait, with its stderr."""
    try:
        view = memoryview(message)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


def _reap(proc: subprocess.Popen[bytes], *, kill: bool, timeout_s: float = 5.0) -> None:
    """Signal ``proc`` (SIGKILL or SIGTERM) and wait for it; escalate to SIGKILL on timeout."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if kill:
            proc.kill()
        else:
            proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGKILL the fake if whoever started it dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stop()/kill() and the context manager still clean up
