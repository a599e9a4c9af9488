"""``queue-fifo``: SQS FIFO's MessageDeduplicationId, a 5-minute window, and no lookup.

The dedup id is the delivery's key. Nothing can be asked after a timeout, so ``reconcile``
answers "unknown" (``conclusive=False``): a resend with the same id inside the window is
safe because the queue answers it with the original ``MessageId`` and hands nothing new to a
consumer; outside the window the worker must not resend (``review``).
"""

from __future__ import annotations

from typing import ClassVar

from harness.reference.adapters.base import (
    HttpSession,
    ReconcileTarget,
)
from harness.reference.provider_client import Lookup, SendResult

DEFAULT_WINDOW_S = 300.0


class QueueFifoAdapter(HttpSession):
    preset: ClassVar[str] = "queue-fifo"
    has_lookup: ClassVar[bool] = False

    def __init__(
        self, base_url: str, secret: str, *, timeout_s: float, window_s: float = DEFAULT_WINDOW_S
    ) -> None:
        super().__init__(base_url, secret, timeout_s=timeout_s)
        self._window_s = window_s

    @property
    def can_reconcile(self) -> bool:
        return False

    @property
    def key_window_s(self) -> float | None:
        return self._window_s

    def send(
        self,
        *,
        key: str,
        destination: str,
        run_id: str,
        delivery_id: str,
        body: str,
        recognizer: str,
    ) -> SendResult:
        return self.send_keyed(
            key_header="MessageDeduplicationId",
            id_field="MessageId",
            key=key,
            destination=destination,
            run_id=run_id,
            delivery_id=delivery_id,
            body=body,
            recognizer=recognizer,
        )

    def reconcile(self, target: ReconcileTarget) -> Lookup:
        return Lookup(found=False, conclusive=False)
