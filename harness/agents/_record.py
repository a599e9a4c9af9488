"""What every framework's record read as a ledger shares: its pending calls are its queue,
and a key is compared only when the framework's record gives the key the send carried."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from harness.usersystem import LedgerAdapter


class FrameworkRecord(LedgerAdapter):
    """A ``LedgerAdapter`` over a framework's own record (checkpoints, step tables)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.key_read_back():
            cls.not_given = {k: v for k, v in cls.not_given.items() if k != "idempotency_key"}

    @classmethod
    def key_read_back(cls) -> bool:
        """Whether the record gives the key the send carried (then it is compared)."""
        return False

    def queue(self, conn: Connection) -> list[str]:
        """A call with no result yet is queued: the recovered run makes it (again)."""
        return [str(r["delivery_id"]) for r in self.deliveries(conn) if r["status"] == "pending"]
