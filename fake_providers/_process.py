"""``ProviderProcess``: run a fake provider as a real subprocess the harness can kill.

Out of process on purpose: the provider must keep its own state (and its durable log) while
workers are SIGKILLed, and tests can SIGKILL the provider itself and restart it on the same
log. Readiness comes from the one JSON line the server prints, read with ``select`` and a
deadline, so a server that dies or hangs at start fails fast with its stderr attached.

The server is forked from the caller where that is safe (``_fork_allowed``): the harness has
every module the server needs imported already, so a fork saves a new interpreter and its
imports (about 0.2 s of a one-point run); the child is made as separate as an exec'd one.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
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
    forget_env,
    secrets_message,
)
from fake_providers._errors import ProviderError, ProviderStartError
from fake_providers._heartbeat import Listener
from fake_providers._identify import Identify
from fake_providers._options import option_json
from fake_providers._presets import get_preset
from fake_providers._server import check_host

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_STDERR_TAIL_BYTES = 8_000
#: secret variables never passed on to a provider's environment
_SECRET_ENVS = frozenset({ADMIN_TOKEN_ENV, CREDENTIALS_ENV, SECRET_ENV})


class ProviderProcess:
    """A running fake provider process (``python -m fake_providers serve``, or the same program
    forked from this process). Use ``ProviderProcess.start``.

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
        self._proc: subprocess.Popen[bytes] | _Forked | None = None
        #: the read end of the running server's heartbeat pipe (``fake_providers._heartbeat``)
        self._heartbeat: Listener | None = None

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

    def heard(self) -> float | None:
        """When the running server's loop last turned (``time.monotonic()``; its
        heartbeat, ``fake_providers._heartbeat``), read now without blocking; None before
        it started. A SIGSTOPped or frozen server falls silent here in a beat or two."""
        return None if self._heartbeat is None else self._heartbeat.heard()

    @property
    def heartbeat_fd(self) -> int | None:
        """The descriptor the heartbeat is read from (a forked worker closes it)."""
        return None if self._heartbeat is None else self._heartbeat.fd

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
        args = ["serve", "--preset", self.preset, "--port", str(port), "--host", self.host]
        args += ["--log", str(self.log_path)]
        if self.window_s is not None:
            args += ["--window-s", repr(float(self.window_s))]
        options = dict(self.options)
        if smtp_port is not None:
            options["smtp_port"] = smtp_port
        if options:
            args += ["--options-json", json.dumps(options, default=option_json)]
        if not self.durable:
            args.append("--no-log")
        # The secrets travel on a pipe the server reads once at start-up, never in its
        # environment: /proc/<pid>/environ keeps the initial environment for the process's
        # whole life, readable by any process of the same user (a worker under test too).
        # Secret variables a user exported for a provider of their own are not passed on.
        # The server beats on a pipe of its own while its loop turns; only this object
        # reads it (``heartbeat``), and no client of the server can hold or fill it.
        secrets_r, secrets_w = os.pipe()
        beat_r, beat_w = os.pipe()
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        proc: subprocess.Popen[bytes] | _Forked
        try:
            with self.stderr_path.open("ab") as stderr_file:
                stderr_start = stderr_file.tell()
                if _fork_allowed():
                    proc = _Forked.serve(args, stderr_file.fileno(), secrets_r, beat_w)
                else:
                    proc = _popen(args, stderr_file, secrets_r, beat_w)
        except BaseException:
            os.close(secrets_w)
            os.close(beat_r)
            raise
        finally:
            os.close(secrets_r)
            os.close(beat_w)
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
            os.close(beat_r)
            raise ProviderStartError(f"{exc}{self._stderr_since(stderr_start)}") from None
        proc.stdout.close()
        self._proc = proc
        if self._heartbeat is not None:
            self._heartbeat.close()
        self._heartbeat = Listener(beat_r)
        self.url = str(ready["url"])
        self.pid = int(ready["pid"])
        self.smtp_port = int(ready["smtp_port"]) if "smtp_port" in ready else None
        self.admin = AdminClient(self.url, self._admin_token)

    def _read_ready_line(
        self, proc: subprocess.Popen[bytes] | _Forked, stdout: IO[bytes]
    ) -> dict[str, Any]:
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
        if self._heartbeat is not None:
            self._heartbeat.close()
            self._heartbeat = None

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


def _reap(proc: subprocess.Popen[bytes] | _Forked, *, kill: bool, timeout_s: float = 5.0) -> None:
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


def _die_with_parent(name: bytes = b"") -> None:  # pragma: no cover - runs in the child
    """Ask Linux to SIGKILL the fake if whoever started it dies, even by SIGKILL; a forked
    server also takes ``name`` as its process name (``/proc/<pid>/comm``, what ``ps``
    shows), its command line being the harness's."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if name:
            libc.prctl(15, ctypes.c_char_p(name[:15]), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass  # not Linux: stop()/kill() and the context manager still clean up


def _popen(
    args: list[str], stderr_file: IO[bytes], secrets_r: int, beat_w: int
) -> subprocess.Popen[bytes]:
    """The server in a new interpreter (``python -m fake_providers serve``): the way when
    this process cannot fork safely (``_fork_allowed``)."""
    env = {k: v for k, v in os.environ.items() if k not in _SECRET_ENVS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "fake_providers", *args),
            *("--secrets-fd", str(secrets_r), "--heartbeat-fd", str(beat_w)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        env=env,
        start_new_session=True,
        close_fds=True,
        pass_fds=(secrets_r, beat_w),
        preexec_fn=_die_with_parent,
    )


def process_name(preset: str) -> str:
    """What a forked server is called in ``/proc/<pid>/comm`` (at most 15 bytes)."""
    return f"fp:{preset}"[:15]


#: set (to anything) to start every provider in a new interpreter, never forked
NO_FORK_ENV = "FAKE_PROVIDERS_NO_FORK"


def _fork_allowed() -> bool:
    """Fork the server from this process (no new interpreter, no second import of the
    server's modules: the harness has them already) only where a fork is safe: Linux (the
    death signal), and no other thread alive, whose locks the child could inherit held."""
    return (
        sys.platform == "linux"
        and threading.active_count() == 1
        and not os.environ.get(NO_FORK_ENV)
    )


class _Forked:
    """A server forked from this process, with the part of ``subprocess.Popen`` that
    ``ProviderProcess`` uses: ``pid``, ``stdout`` (its ready line), ``poll``, ``wait``,
    ``kill``, ``terminate``. Only this object reaps it, so its pid cannot be reused while
    it is signalled."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None

    @classmethod
    def serve(cls, args: list[str], stderr_fd: int, secrets_r: int, beat_w: int) -> _Forked:
        """Fork; the child runs ``python -m fake_providers`` ``args`` in place of its copy
        of this program, and never returns."""
        import fake_providers.__main__ as serve_main

        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
            with contextlib.suppress(Exception):
                stream.flush()
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except BaseException:
            os.close(ready_r)
            os.close(ready_w)
            raise
        if pid == 0:  # pragma: no cover - the child; it ends in os._exit
            _serve_in_child(serve_main.main, args, parent, ready_w, stderr_fd, secrets_r, beat_w)
        os.close(ready_w)
        return cls(pid, os.fdopen(ready_r, "rb", buffering=0))

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, status unknown (as Popen)
                self.returncode = 0
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if timeout is not None:
            try:
                fd = os.pidfd_open(self.pid)  # readable once it has exited: no polling
            except ProcessLookupError:
                fd = -1  # reaped elsewhere: the waitpid below says so
            if fd >= 0:
                try:
                    if not select.select([fd], [], [], timeout)[0]:
                        raise subprocess.TimeoutExpired([str(self.pid)], timeout)
                finally:
                    os.close(fd)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere: gone, status unknown (as Popen)
            self.returncode = 0
            return self.returncode
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _serve_in_child(  # pragma: no cover - runs in the forked child only
    main: Callable[[list[str]], int],
    args: list[str],
    parent: int,
    ready_w: int,
    stderr_fd: int,
    secrets_r: int,
    beat_w: int,
) -> None:
    """The forked child: become what ``_popen`` would have started, then serve.

    The same process as a new interpreter's as far as anyone can tell: its own session,
    SIGKILLed when the harness dies, stdin /dev/null, stdout the ready pipe, stderr the
    log's file, no other descriptor of the harness's (a worker's pipe held open here would
    hang the harness), no secret variable in its environment, default signal handling."""
    code = 1
    try:
        os.setsid()
        _die_with_parent(process_name(args[args.index("--preset") + 1]).encode())
        if os.getppid() != parent:  # the harness died before the death signal was set
            os._exit(1)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL)
        gc.freeze()  # the harness's objects are never collected here: none closes a reused fd
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(ready_w, 1)
        os.dup2(stderr_fd, 2)
        os.dup2(secrets_r, 3)
        os.dup2(beat_w, 4)
        os.closerange(5, os.sysconf("SC_OPEN_MAX"))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        forget_env(_SECRET_ENVS)  # out of os.environ and blanked in /proc/<pid>/environ
        code = main([*args, "--secrets-fd", "3", "--heartbeat-fd", "4"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
