"""Who signed an HTTP request with ``Authorization: Bearer <secret>``, or why nobody did.

Most presets and the SMTP mailbox authenticate this way; the refusal must say what was
wrong (no header, another scheme, an unknown token) without ever showing a secret.
"""

from __future__ import annotations

from collections.abc import Mapping

from werkzeug.wrappers import Request

from fake_providers._credentials import Credential, find_credential


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if well formed."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def bearer_credential(credentials: Mapping[str, Credential], request: Request) -> Credential | None:
    """The credential whose secret is the request's bearer token, if any."""
    token = bearer_token(request)
    return None if token is None else find_credential(credentials, token)


def bearer_or_reason(credentials: Mapping[str, Credential], request: Request) -> Credential | str:
    """The bearer token's credential, or why there is none (never showing a secret)."""
    header = request.headers.get("Authorization")
    if header is None:
        return "no Authorization header (expected: Authorization: Bearer <secret>)"
    credential = bearer_credential(credentials, request)
    if credential is not None:
        return credential
    if bearer_token(request) is None:
        scheme = header.partition(" ")[0] or "(empty)"
        return f"Authorization scheme {scheme!r} is not Bearer <secret>"
    return "the bearer token matches no credential of this provider"
