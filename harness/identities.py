"""The stable identities of one intended send, (run, destination): its delivery id, its
idempotency key and its recognizer.

Kept apart from ``harness.usersystem`` (which re-exports them for workers) so that the
checkers can name a delivery the same way a worker and a ledger adapter do: a mail whose
identification rule read the run and the recipient but no delivery id is the delivery
``delivery_id_for(run, recipient)``, never one empty id shared by every such mail.
"""

from __future__ import annotations

import hashlib


def _digest(kind: str, run_id: str, destination: str) -> str:
    return hashlib.sha256(f"{kind}\x1f{run_id}\x1f{destination}".encode()).hexdigest()


def delivery_id_for(run_id: str, destination: str) -> str:
    """The delivery's identity: the same for a (run, destination) in every process, forever."""
    return f"dlv_{_digest('delivery', run_id, destination)[:24]}"


def idempotency_key_for(run_id: str, destination: str) -> str:
    """A key derived from the delivery's identity, never from an attempt."""
    return f"key_{_digest('key', run_id, destination)[:32]}"


def recognizer_for(run_id: str, destination: str) -> str:
    """The content-visible canary (``ch-`` and 12 hex) that providers log with each effect."""
    return f"ch-{_digest('recognizer', run_id, destination)[:12]}"
