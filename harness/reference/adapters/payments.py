"""``payments``: Idempotency-Key, a 24 h window, and a lookup by key (the original client)."""

from __future__ import annotations

from typing import ClassVar

from harness.reference.adapters.base import ReconcileTarget
from harness.reference.provider_client import Lookup, ProviderClient

DEFAULT_WINDOW_S = 86_400.0


class PaymentsAdapter(ProviderClient):
    """Reconciles by asking for the key; resends inside the window are deduplicated."""

    preset: ClassVar[str] = "payments"
    has_lookup: ClassVar[bool] = True

    def __init__(
        self, base_url: str, secret: str, *, timeout_s: float, window_s: float = DEFAULT_WINDOW_S
    ) -> None:
        super().__init__(base_url, secret, timeout_s=timeout_s)
        self._window_s = window_s

    @property
    def can_reconcile(self) -> bool:
        return True

    @property
    def key_window_s(self) -> float | None:
        return self._window_s

    def reconcile(self, target: ReconcileTarget) -> Lookup:
        return self.lookup(target.key)
