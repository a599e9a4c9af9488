"""Worker credentials and the admin token: how they travel, how they are checked.

Secrets reach the server through an inherited pipe (``ProviderProcess``: nothing another
process can read later) or, started by hand, through files or environment variables (argv
is visible to every user via ``ps``). They are compared in constant time and never written
anywhere by the server: the effect log stores only the credential *id*.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import functools
import hmac
import json
import os
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final

from fake_providers._errors import ProviderError

CREDENTIALS_ENV: Final = "CRASH_HARNESS_PROVIDER_CREDENTIALS"
ADMIN_TOKEN_ENV: Final = "CRASH_HARNESS_PROVIDER_ADMIN_TOKEN"
SECRET_ENV: Final = "CRASH_HARNESS_PROVIDER_SECRET"
"""The one worker secret ``providers serve --secret`` reads (also what a harness worker reads)."""

OPEN_CREDENTIAL_ID: Final = "(open)"
"""The credential id an open receiver (a ``webhook`` with ``open`` on) logs every request
under: it looked at no credential."""

MIN_FIXED_LENGTH: Final = 16
MAX_FIXED_LENGTH: Final = 256


@dataclass(frozen=True)
class Credential:
    """One worker identity: its id (logged), its secret (never logged) and scope globs."""

    credential_id: str
    secret: str
    scope: tuple[str, ...]

    def __repr__(self) -> str:
        # Keep the secret out of tracebacks and debug prints.
        return f"Credential(credential_id={self.credential_id!r}, scope={self.scope!r})"

    def allows(self, destination: str) -> bool:
        """True if ``destination`` matches one of the scope globs (fnmatch, case-sensitive)."""
        return any(fnmatch.fnmatchcase(destination, glob) for glob in self.scope)


def new_secret() -> str:
    """A fresh random secret, URL-safe, 256 bits."""
    return secrets.token_urlsafe(32)


def check_fixed(value: str, what: str) -> None:
    """Refuse a secret or token chosen by a human that is empty, too short or not printable.

    ``what`` names where it came from (``--secret (or CRASH_HARNESS_PROVIDER_SECRET)``), so
    the one-line error tells the user what to fix; the value itself is never echoed. Only
    printable ASCII without spaces is allowed: it has to survive an ``Authorization: Bearer``
    header, SMTP AUTH and a shell, unchanged.
    """
    if not value:
        raise ProviderError(f"{what} must not be empty")
    if len(value) < MIN_FIXED_LENGTH:
        raise ProviderError(
            f"{what} must be at least {MIN_FIXED_LENGTH} characters, got {len(value)}"
        )
    if len(value) > MAX_FIXED_LENGTH:
        raise ProviderError(f"{what} must be at most {MAX_FIXED_LENGTH} characters")
    bad = sorted({c for c in value if not "!" <= c <= "~"})
    if bad:
        raise ProviderError(
            f"{what} may hold only printable ASCII without spaces"
            f" (found {', '.join(f'U+{ord(c):04X}' for c in bad[:3])})"
        )


def parse_credentials(text: str) -> dict[str, Credential]:
    """Parse ``{"<id>": {"secret": "...", "scope": ["glob", ...]}}``; errors never echo secrets."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProviderError(f"{CREDENTIALS_ENV} is not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not data:
        raise ProviderError(f"{CREDENTIALS_ENV} must be a non-empty JSON object")
    out: dict[str, Credential] = {}
    for cred_id, spec in data.items():
        if not isinstance(spec, dict):
            raise ProviderError(f"credential {cred_id!r}: expected an object with secret and scope")
        secret = spec.get("secret")
        scope = spec.get("scope")
        if not isinstance(secret, str) or not secret:
            raise ProviderError(f"credential {cred_id!r}: 'secret' must be a non-empty string")
        if not isinstance(scope, list) or not all(isinstance(g, str) for g in scope):
            raise ProviderError(f"credential {cred_id!r}: 'scope' must be a list of glob strings")
        out[cred_id] = Credential(credential_id=cred_id, secret=secret, scope=tuple(scope))
    secrets_seen = [c.secret for c in out.values()]
    if len(set(secrets_seen)) != len(secrets_seen):
        raise ProviderError(f"{CREDENTIALS_ENV}: two credentials share one secret")
    return out


def dump_credentials(credentials: Mapping[str, tuple[str, list[str]]]) -> str:
    """Serialise ``{id: (secret, scope)}`` into the JSON the server reads from the env."""
    return json.dumps(
        {
            cid: {"secret": secret, "scope": list(scope)}
            for cid, (secret, scope) in credentials.items()
        }
    )


def find_credential(credentials: Mapping[str, Credential], presented: str) -> Credential | None:
    """Return the credential whose secret equals ``presented`` (constant-time per candidate)."""
    found: Credential | None = None
    given = presented.encode()
    for cred in credentials.values():
        if hmac.compare_digest(cred.secret.encode(), given):
            found = cred
    return found


def token_matches(expected: str, presented: str | None) -> bool:
    """Constant-time comparison of the admin token."""
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


#: the longest secrets message a provider reads from its pipe (credentials of a big roster)
_MAX_SECRETS_BYTES = 4 << 20


def read_secrets_fd(fd: int) -> tuple[str, str]:
    """``(credentials JSON, admin token)`` from the one JSON line ``ProviderProcess`` writes
    to an inherited pipe; the pipe is closed once read, so nothing else can read it after.

    One line, not "until EOF": a process that inherited the write end by accident (a
    worker forked while it was open) cannot keep the provider from starting."""
    data = b""
    try:
        while b"\n" not in data and len(data) < _MAX_SECRETS_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise ProviderError(f"--secrets-fd {fd}: cannot read it ({exc.strerror})") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    try:
        message = json.loads(data.split(b"\n", 1)[0])
        credentials, token = message["credentials"], message["admin_token"]
    except (ValueError, KeyError, TypeError):
        raise ProviderError(
            f"--secrets-fd {fd}: expected one JSON line with credentials and admin_token"
        ) from None
    if not isinstance(token, str) or not token:
        raise ProviderError(f"--secrets-fd {fd}: admin_token must be a non-empty string")
    return json.dumps(credentials), token


def secrets_message(credentials_json: str, admin_token: str) -> bytes:
    """What ``ProviderProcess`` writes to the provider's secrets pipe (``read_secrets_fd``)."""
    line = json.dumps({"credentials": json.loads(credentials_json), "admin_token": admin_token})
    return line.encode() + b"\n"


@functools.cache
def libc_environ() -> ctypes._Pointer[ctypes.c_void_p]:
    """libc's ``environ`` (the variable itself, so every read sees its current value), looked
    up once: a process that forks workers calls this first, so no worker pays for the lookup
    (0.2 ms and ~80 copy-on-write faults in each one, measured)."""
    return ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")


def forget_env(names: Collection[str]) -> None:
    """Remove ``names`` from this process's environment, and blank their values in the
    environment block the process started with.

    ``os.environ.pop`` alone is not enough: ``/proc/<pid>/environ`` shows the initial block
    for the process's whole life, readable by every process of the same user, and a forked
    child inherits it. The values are overwritten in place with NUL bytes (as
    ``setproctitle`` overwrites argv); where libc's ``environ`` cannot be reached, only the
    pop happens."""
    wanted = {name.encode() for name in names}
    try:
        environ = libc_environ()
        index = 0
        while environ[index]:
            address = environ[index]
            assert address is not None
            entry = ctypes.string_at(address)
            name, sep, value = entry.partition(b"=")
            if sep and name in wanted and value:
                ctypes.memset(address + len(name) + 1, 0, len(value))
            index += 1
    except (OSError, ValueError, AttributeError):
        pass  # no libc environ to reach: the variables still leave os.environ
    for variable in names:
        os.environ.pop(variable, None)


_PR_SET_DUMPABLE = 4


def not_dumpable() -> None:
    """``PR_SET_DUMPABLE`` 0 for this process (a provider holding the admin token, the
    harness): another process of the same user may then neither ptrace it nor read its
    memory, environ or open files (``/proc/<pid>/mem``, ``fd``) without ``CAP_SYS_PTRACE``,
    and it leaves no core dump with the secrets in it. A fork inherits it; an exec resets it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def blank_secret(secret: str) -> None:
    """Overwrite the characters of ``secret`` with NULs in this process's own copy of memory
    (a forked worker's, copy-on-write: its parent's stays whole), so every reference to that
    string object in this process reads a blank. Only an ASCII string: a token is one."""
    if not secret.isascii() or len(secret) < MIN_FIXED_LENGTH:
        return
    import sys

    offset = sys.getsizeof("") - 1  # a compact ASCII string's characters follow its header
    ctypes.memset(id(secret) + offset, 0, len(secret))
