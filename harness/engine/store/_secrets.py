"""Every secret the harness hands out, so none of it reaches a report or the terminal.

A worker's stderr goes into reports, and a worker may print its whole environment (the
provider credential is in it) or a provider's reply. So the harness remembers each secret it
creates or passes on (provider credentials, the provider's admin token) and ``scrub`` takes
them out of any text it stores or prints. Per process: a forked job registers its own.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fake_providers._credentials import ADMIN_TOKEN_ENV, CREDENTIALS_ENV, forget_env, libc_environ

#: what a secret becomes in anything the harness writes
MASK = "***"
#: shorter strings are no secret of ours, and masking them would garble ordinary text
_MIN_LEN = 8

_handed_out: set[str] = set()

#: the password of ``scheme://user:password@`` anywhere in a text
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s/]+(?P<at>@)")


#: variables that carry a provider's admin token or every credential it grants: never in the
#: environment of a worker, a probe or a hook (a user may have exported them for a provider
#: of their own; the harness's providers get theirs on a pipe, ``ProviderProcess``)
PROVIDER_ONLY_ENV = (ADMIN_TOKEN_ENV, CREDENTIALS_ENV)


def without_provider_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` minus ``PROVIDER_ONLY_ENV``: the environment a process under test may get."""
    return {k: v for k, v in env.items() if k not in PROVIDER_ONLY_ENV}


def forget_provider_secrets() -> None:
    """Drop ``PROVIDER_ONLY_ENV`` from this process's environment, ``/proc/<pid>/environ``
    included (a forked worker, before it runs the system under test, and so everything that
    system starts)."""
    forget_env(PROVIDER_ONLY_ENV)


def ready_to_forget() -> None:
    """Do in this process, once, what ``forget_provider_secrets`` would otherwise do in every
    worker forked from it: find libc's environment block."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        libc_environ()


def hide_url_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced by ``MASK``
    (also in a URL SQLAlchemy could not parse)."""
    return _URL_PASSWORD.sub(rf"\g<head>{MASK}\g<at>", text) if "://" in text else text


def hand_out(*secrets: str) -> None:
    """Remember ``secrets`` as given to a worker or a provider."""
    _handed_out.update(s for s in secrets if len(s) >= _MIN_LEN)


def scrub(text: str) -> str:
    """``text`` with every secret handed out in this process replaced by ``MASK``."""
    for secret in sorted(_handed_out, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


#: how much of a file ``scrub_file`` holds in memory at once (plus one secret's length)
SCRUB_CHUNK = 1 << 20


def scrub_file(path: Path, *, chunk: int = SCRUB_CHUNK) -> bool:
    """Take every secret handed out in this process out of the file at ``path``, in place.

    A worker's stderr file can be gigabytes: it is read ``chunk`` bytes at a time (a secret
    cut by a chunk's end is caught with the next), and rewritten only when a secret is in it,
    in place (a mask is shorter than any secret, so what is written never overtakes what is
    still to be read). Returns True when something was masked."""
    secrets = sorted({s.encode() for s in _handed_out}, key=len, reverse=True)
    if not secrets:
        return False
    overlap = len(secrets[0]) - 1
    mask = MASK.encode()
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        if not _holds_secret(fd, secrets, chunk, overlap):
            return False
        read_at = write_at = 0
        carry = b""
        while True:
            data = os.pread(fd, chunk, read_at)
            read_at += len(data)
            buf = carry + data
            for secret in secrets:
                buf = buf.replace(secret, mask)
            cut = len(buf) if not data else max(0, len(buf) - overlap)
            os.pwrite(fd, buf[:cut], write_at)
            write_at += cut
            carry = buf[cut:]
            if not data:
                break
        os.ftruncate(fd, write_at)
        return True
    finally:
        os.close(fd)


def _holds_secret(fd: int, secrets: list[bytes], chunk: int, overlap: int) -> bool:
    offset = 0
    carry = b""
    while data := os.pread(fd, chunk, offset):
        offset += len(data)
        buf = carry + data
        if any(secret in buf for secret in secrets):
            return True
        carry = buf[-overlap:] if overlap else b""
    return False


def scrub_all(value: Any) -> Any:
    """``scrub`` applied to every string in a JSON-like value."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_all(v) for v in value]
    return value


def hand_out_url(url: str) -> None:
    """Remember the passwords in a database URL, in every form SQLAlchemy accepts: the
    ``user:password@`` part and any ``?password=`` (``sslpassword``...) query value."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # not a URL SQLAlchemy reads: the caller refuses it
        return
    if parsed.password:
        hand_out(str(parsed.password))
    for key, value in parsed.query.items():
        if key.lower().endswith(("password", "secret", "token")):
            hand_out(*([value] if isinstance(value, str) else value))
