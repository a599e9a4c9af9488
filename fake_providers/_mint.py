"""Provider-side ids (message, delivery, order) that replay identically run after run.

A report names the ids a provider gave out, so two runs of one seed must mint the same
ones; yet no two effects of one provider may share an id, not even across a restart on the
same log. Ids are therefore drawn from what the request is, not from a random source.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

from fake_providers._attempt import Attempt


class IdMint:
    """Mints ids from the epoch, the attempt's key, how many ids that key has had in this
    epoch and ``salt`` (the log's size when this process started: a restarted provider
    never re-mints an earlier id)."""

    def __init__(self, salt: int, epoch: Callable[[], int]) -> None:
        self._salt = salt
        self._epoch = epoch
        self._minted: dict[tuple[int, str, str], int] = {}
        self._lock = threading.Lock()

    def mint(self, attempt: Attempt, prefix: str, nbytes: int = 8) -> str:
        """An id for ``attempt``: a race between workers sending different keys cannot
        shuffle which key gets which id."""
        key = attempt.idempotency_key or attempt.delivery_id or attempt.destination or ""
        with self._lock:
            slot = (self._epoch(), prefix, key)
            n = self._minted.get(slot, 0)
            self._minted[slot] = n + 1
        seed = f"{self._salt}\0{slot[0]}\0{prefix}\0{key}\0{n}".encode()
        return prefix + hashlib.sha256(seed).hexdigest()[: 2 * nbytes]

    def forget(self) -> None:
        """A new epoch began: its keys count from zero again."""
        with self._lock:
            self._minted.clear()
