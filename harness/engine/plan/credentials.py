"""Narrowed credentials: one provider credential per destination group, as deployments have.

A campaign grants either one ``shared`` credential scoped to everything (``"*"``), or one
credential per destination group: ``per-topic`` (each roster topic's destinations, named
literally) or ``per-domain`` (``*@domain`` for every e-mail domain on the roster). The
provider is started with exactly these grants and refuses (403, logged ``refused``) a send
outside the presenting credential's scope; the worker must choose, per destination, the
credential whose scope covers it; ``credential_scope`` judges what the provider saw against
the same grants (``Policy.credential_scopes``), never against what the worker recorded.
"""

from __future__ import annotations

import fnmatch
import glob
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

#: the scenario's ``[provider] credentials`` values
CREDENTIAL_MODES: tuple[str, ...] = ("shared", "per-topic", "per-domain")
#: the id of the one credential a ``shared`` campaign grants
SHARED_ID = "worker"


@dataclass(frozen=True)
class Credential:
    """One provider credential: its id (logged by the provider), secret (never logged) and
    the destination globs it may send to."""

    credential_id: str
    secret: str = field(repr=False)
    scope: tuple[str, ...]

    @property
    def scope_text(self) -> str:
        """The scope as the ledger and the audit trail record it: the globs, comma-joined."""
        return scope_text(self.scope)

    def allows(self, destination: str) -> bool:
        """The provider's own test (``fake_providers._credentials``): any glob matches."""
        return any(fnmatch.fnmatchcase(destination, g) for g in self.scope)


def scope_text(scope: tuple[str, ...] | list[str]) -> str:
    """How a scope is written down in a ledger row or audit event."""
    return ",".join(scope)


def _literal(text: str) -> str:
    """A glob matching exactly ``text`` (fnmatch reads ``[*]`` as a literal ``*``)."""
    return glob.escape(text)


def grants(mode: str, roster: Mapping[str, tuple[str, ...]]) -> tuple[Credential, ...]:
    """The credentials a campaign grants for ``mode`` over the workload's roster, each with a
    fresh secret. Group order (topic, domain) is sorted, so credential ids are stable."""
    if mode == "shared":
        return (Credential(SHARED_ID, secrets.token_urlsafe(24), ("*",)),)
    if mode == "per-topic":
        return tuple(
            Credential(
                f"cred-{topic}",
                secrets.token_urlsafe(24),
                tuple(_literal(d) for d in sorted(dests)),
            )
            for topic, dests in sorted(roster.items())
        )
    if mode == "per-domain":
        domains = sorted({d.rpartition("@")[2] for dests in roster.values() for d in dests})
        return tuple(
            Credential(f"cred-{domain}", secrets.token_urlsafe(24), (f"*@{_literal(domain)}",))
            for domain in domains
        )
    raise ValueError(f"unknown credentials mode {mode!r}; expected one of {CREDENTIAL_MODES}")


def choose(credentials: tuple[Credential, ...], destination: str) -> Credential | None:
    """The first credential whose scope covers ``destination`` (None: none does)."""
    return next((c for c in credentials if c.allows(destination)), None)
