"""Mutant ``uuid_delivery_ids``: writes each destination's delivery in the transaction that
commits the result, under a random id, and then the old enqueue step writes it again.

A half-finished migration. The team moved the delivery writes into the result's transaction
(as it should be) and gave them uuid ids "so they cannot be guessed", but kept the enqueue
step, which looks for each destination's delivery by its *derived* id, finds none, and writes
a second one; nothing in the schema says one (run, destination) has one delivery. Both carry
the key derived from (run, destination), so the provider deduplicates the second send (or
refuses its different body) and no recipient gets two copies; but a committed run now has two
durable identities for one destination, one ``delivered`` and one not, and an operator (or a
provider that dedupes nothing) is left with two deliveries of one message.
``one_delivery_identity`` must catch it.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Engine, text

from harness.mutants._base import mutant_system
from harness.reference import schema
from harness.reference.ledger import Ledger, _AuditRow, delivery_identity, sha256_hex
from harness.reference.schema import RunRequest
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


def _subject(values: dict[str, Any]) -> _AuditRow:
    """What an audit event about a new delivery row repeats of it."""
    return _AuditRow(**{f: values[f] for f in _AuditRow._fields if f in values})


class UuidDeliveryIdsLedger(Ledger):
    """Deliveries with uuid ids at commit; an enqueue that checks by derived id."""

    def commit_result(
        self, run: RunRequest, *, step_id: str, result_body: str, destinations: list[str]
    ) -> bool:
        now = self.now()
        key = {"run_id": run.run_id, "step_id": step_id}
        result_ref = f"result:{run.run_id}:{step_id}"
        with self._tx() as cur:
            existing = self._run(cur, "execution_status", key).fetchone()
            if existing is not None and existing[0] == "committed":
                return False
            if existing is not None:
                self._run(cur, "delete_execution", key)
            self._run(
                cur,
                "insert_execution",
                {
                    **key,
                    "input_hash": sha256_hex(run.input_payload),
                    "execution_status": "committed",
                    "result_ref": result_ref,
                    "result_body": result_body,
                    "started_at": now,
                    "finished_at": now,
                },
            )
            for dest in destinations:
                self._run(cur, "freeze", {"run_id": run.run_id, "destination": dest})
                values = self._delivery_values(
                    run.run_id,
                    result_ref,
                    result_body,
                    dest,
                    now=now,
                    identity=f"dlv_{uuid.uuid4().hex[:24]}",
                )
                # the key stays a function of (run, destination): "the provider dedupes"
                values["idempotency_key"] = self.key_for(delivery_identity(run.run_id, dest))
                self._run(cur, "insert_delivery", values)
                queued = {"delivery_id": values["delivery_id"], "enqueued_at": now}
                self._run(cur, "insert_queue_item", queued)
                self._audit(cur, _subject(values), "enqueued", epoch=0)
        return True

    def enqueue_deliveries(self, run_id: str) -> int:
        """The old step: looks each destination's delivery up by its derived id."""
        now = self.now()
        created = 0
        with self._tx() as cur:
            (_, result_ref, result_body) = self._run(
                cur, "execution_of_run", {"run_id": run_id}
            ).fetchone()
            for dest in sorted(self._column(cur, "frozen", {"run_id": run_id})):
                derived = delivery_identity(run_id, dest)
                found = self._run(cur, "audit_row", {"delivery_id": derived}).fetchone()
                if found is not None:
                    continue
                values = self._delivery_values(run_id, result_ref, result_body, dest, now=now)
                self._run(cur, "insert_delivery", values)
                queued = {"delivery_id": values["delivery_id"], "enqueued_at": now}
                self._run(cur, "insert_queue_item", queued)
                self._audit(cur, _subject(values), "enqueued", epoch=0)
                created += 1
        return created


class UuidDeliveryIdsWorker(ReferenceWorker):
    """Writes each delivery twice: under a uuid at commit, under its derived id at enqueue."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config)
        self.ledger = UuidDeliveryIdsLedger(self.engine, config, clock=self.clock.now)


def _prepare(engine: Engine) -> None:
    schema.Base.metadata.create_all(engine)
    with engine.begin() as conn:
        # The mistake needs room to happen: no uniqueness on (run, destination).
        conn.execute(text("DROP INDEX uq_delivery_identity"))


def system() -> System:
    return mutant_system(
        "uuid_delivery_ids",
        UuidDeliveryIdsWorker,
        expected_violation="one_delivery_identity",
        prepare=_prepare,
    )
