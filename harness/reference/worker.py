"""The reference worker: the safe sequence from the seed article, one boundary per step.

1. commit the result and freeze its destinations in one transaction;
2. write one delivery row and queue item per destination;
3. claim with a lease (fencing epoch);
4. send with a key derived from the delivery's identity;
5. persist the provider's answer, or an explicit ``unknown``;
6. acknowledge, then remove the queue item (the ledger row stays forever).

After a restart, a delivery that may already have reached the provider (an attempt was
recorded) is reconciled *before* anything is resent (by lookup where the provider has one,
else by finding the delivery's recognizer on the provider's surface; see ``adapters``), and
a resend that would fall outside the key's dedupe window is not made: the delivery goes to
``review``.

Mutants subclass this and override one method each, so each mistake reads as a diff.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cached_property

from sqlalchemy import Engine

from harness import boundary
from harness.destinations import distinct
from harness.errors import LeaseLostError
from harness.names import TERMINAL_STATES
from harness.reference.adapters import (
    ProviderAdapter,
    ReconcileTarget,
    effective_window_s,
    make_adapter,
)
from harness.reference.async_delivery import AsyncDelivery, Watchdog
from harness.reference.ledger import Claim, Ledger
from harness.reference.provider_client import Answer
from harness.reference.schema import RunRequest
from harness.worker_config import WorkerConfig

#: the longest a worker idles before looking at the queue again (a rival's lease may lapse)
IDLE_CAP_S = 0.05


class ReferenceWorker:
    """Runs every pending run, then delivers until every queued delivery is settled."""

    step_id = "compose"

    def __init__(self, config: WorkerConfig) -> None:
        # The ledger freezes the window the worker can rely on with each key (queue-fifo: at
        # most SQS's 5 minutes, whatever the configured default says).
        config = replace(
            config,
            key_window_s=effective_window_s(config.provider_preset, config.key_window_s),
        )
        self.config = config
        self.provider: ProviderAdapter = make_adapter(config)
        #: one adapter (one authenticated session) per narrowed credential, made on first use
        self.adapters: dict[str, ProviderAdapter] = {}
        self.clock = config.clock()
        self.ledger = Ledger(None, config, clock=self.clock.now)

    @cached_property
    def engine(self) -> Engine:
        """SQLAlchemy on the ledger's database, for code that wants it (the mutants' own
        statements); the ledger itself needs none, so it is made only on first use."""
        return self.config.db.engine()

    def run(self) -> None:
        watchdog = self.watchdog()
        watchdog.start()
        try:
            self.recover()
            for run in self.ledger.pending_runs():
                self.execute(run)
            if self.config.delivery_mode == "asyncio":
                self.async_delivery().run()
            else:
                self.deliver_until_settled()
        finally:
            watchdog.stop()
            self.provider.close()
            for adapter in self.adapters.values():
                adapter.close()
            self.ledger.close()
            if "engine" in self.__dict__:
                self.engine.dispose()

    def watchdog(self) -> Watchdog:
        return Watchdog(self)

    def async_delivery(self) -> AsyncDelivery:
        return AsyncDelivery(self, keep_references=True)

    def idle(self, wake: tuple[float | None, float | None]) -> None:
        """Wait for the next due time: jump the clock to our own retry, never past a lease."""
        due, leased = wake
        if due is not None and (leased is None or due <= leased):
            self.clock.sleep_until(due, autojump=self.config.autojump, cap_s=IDLE_CAP_S)
        else:
            target = leased if leased is not None else due or 0.0
            self.clock.sleep_until(target, autojump=False, cap_s=IDLE_CAP_S)

    # -- execution --------------------------------------------------------------------------

    def recover(self) -> None:
        """Finish enqueueing for runs committed before a crash, from the *frozen* list."""
        for run_id in self.ledger.runs_missing_deliveries():
            self.ledger.enqueue_deliveries(run_id)
            boundary("after_delivery_enqueue")

    def destinations_for(self, topic: str) -> list[str]:
        """The topic's roster now, one spelling per recipient: a roster that lists a person
        twice (``Alice@Example.com`` and ``alice@example.com`` on SMTP) means one message.
        Two spellings are one recipient by the provider's rules (``harness.destinations``);
        the first in sorted order is kept."""
        return distinct(self.ledger.resolve_destinations(topic), self.config.provider_preset)

    def compose(self, run: RunRequest) -> str:
        data = json.loads(run.input_payload)
        return f"{data['subject']}\n\n{data['text']}\n\n- {data['author']}"

    def execute(self, run: RunRequest) -> None:
        result = self.compose(run)
        boundary("before_result_commit")
        destinations = self.destinations_for(run.topic)
        boundary("destinations_resolved")
        if not self.ledger.commit_result(
            run, step_id=self.step_id, result_body=result, destinations=destinations
        ):
            return
        boundary("after_result_commit")
        self.ledger.enqueue_deliveries(run.run_id)
        boundary("after_delivery_enqueue")

    # -- delivery ---------------------------------------------------------------------------

    def deliver_until_settled(self) -> None:
        while True:
            claim = self.ledger.claim_next()
            if claim is not None:
                try:
                    self.deliver(claim)
                except LeaseLostError:
                    continue  # a rival holds a newer lease; its outcome stands
                continue
            wake = self.ledger.next_wakeup()
            if wake is None:
                return
            self.idle(wake)

    def deliver(self, claim: Claim) -> None:
        if claim.status_before in TERMINAL_STATES:
            self.cleanup(claim)  # acknowledged before a crash; only the queue item is left
            return
        boundary("after_claim")
        if claim.provider_message_id is not None:
            self.finish(claim)  # the answer was persisted before a crash: never resend
            return
        if self.may_have_forgotten_a_send(claim):
            # Perhaps sent before a restore, and nothing would stop a second copy: look first.
            # (With no attempt on record no fenced worker can be mid-send, so after a
            # conclusive "not found" sending is safe.)
            if self.reconcile(claim):
                return
            if not self.provider.can_reconcile:  # nothing could be inspected: a person decides
                self.ledger.persist_terminal(claim, "review", "send may be lost from ledger")
                boundary("after_response_persisted")
                return
        if claim.attempt_count > 0:
            if self.reconcile(claim):
                return
            if claim.attempt_count >= self.config.max_attempts:
                self.ledger.persist_terminal(claim, "failed", "attempts exhausted")
                boundary("after_response_persisted")
                self.cleanup(claim)
                return
            boundary("before_retry")
            # Checked after the boundary, right before sending: time may pass at any point.
            if not self.within_window(claim):
                self.ledger.persist_terminal(claim, "review", "key window passed; resend unsafe")
                boundary("after_response_persisted")
                return
        self.attempt(claim)

    def adapter_for(self, claim: Claim) -> ProviderAdapter:
        """The provider session signed with the credential the ledger recorded for this
        delivery (its lookups too: a payments key belongs to the credential that sent it)."""
        wanted = claim.credential_id
        if not self.config.credentials or wanted in ("", self.config.credential_id):
            return self.provider
        adapter = self.adapters.get(wanted)
        if adapter is None:
            cred = next((c for c in self.config.credentials if c.credential_id == wanted), None)
            if cred is None:  # a credential this worker was not given: send with the default
                return self.provider
            adapter = make_adapter(
                replace(
                    self.config, credential_id=cred.credential_id, credential_secret=cred.secret
                )
            )
            self.adapters[wanted] = adapter
        return adapter

    def key_for_attempt(self, claim: Claim, attempt: int) -> str:
        """Every attempt uses the key fixed at enqueue time."""
        return claim.idempotency_key

    def may_have_forgotten_a_send(self, claim: Claim) -> bool:
        """True when "no attempt on record" may not mean "never sent", and a second copy
        would not be deduplicated: reconcile before this first send.

        A ledger restored from a backup has lost the attempts made after the backup. A fresh
        delivery is claimed at once and sent inside its key's window, so two shapes give a
        restore away:

        - with a key the provider honours, a delivery older than the window (the provider no
          longer dedupes a copy: a day-old nightly restored, for a payments API);
        - where nothing dedupes (no key: chat, SMTP; or a window of 0), a delivery that
          waited a lease or more before this claim (a crash-and-restart gap, or a restore).
          Its claim time decides, not "now": a worker paused after claiming has already
          made its choice, as the fencing epoch has.
        """
        if claim.attempt_count > 0:
            return False
        if self.provider.key_window_s is None or claim.key_window_s <= 0:
            return claim.claimed_at - claim.created_at >= self.config.lease_s
        margin = self.config.request_timeout_s
        return self.clock.now() + margin >= claim.created_at + claim.key_window_s

    def within_window(self, claim: Claim) -> bool:
        if claim.first_attempt_at is None:
            return True
        if self.provider.key_window_s is None:
            # No key (chat, SMTP): no window makes a resend safe, only the surface inspection
            # that ``deliver`` runs first; reaching here means it answered "not there".
            return True
        # Leave room for the request itself: a resend must land inside the window.
        margin = self.config.request_timeout_s
        return self.clock.now() + margin < claim.first_attempt_at + claim.key_window_s

    def reconcile(self, claim: Claim) -> bool:
        """Ask the provider whether an earlier attempt landed; True if that settled it.

        The adapter looks the key up (payments), inspects the rendered surface for the
        delivery's recognizer (chat thread, SMTP mailbox), or cannot ask at all (queue-fifo:
        "not found" there only means the resend must stay inside the dedupe window).
        """
        boundary("before_reconcile")
        found = self.adapter_for(claim).reconcile(
            ReconcileTarget(
                key=self.key_for_attempt(claim, claim.attempt_count + 1),
                destination=claim.destination,
                run_id=claim.run_id,
                delivery_id=claim.delivery_id,
                recognizer=claim.recognizer,
            )
        )
        if found.error is not None:
            self.waited_out(found.error)
            self.ledger.persist_unknown(
                claim, f"lookup failed: {found.error}", retry_in=self.config.backoff(1)
            )
            boundary("after_response_persisted")
            return True
        if found.found and found.provider_message_id is not None:
            self.ledger.persist_accepted(claim, found.provider_message_id, how="reconciled")
            boundary("after_response_persisted")
            self.finish(claim)
            return True
        return False

    def attempt(self, claim: Claim) -> None:
        attempt = self.ledger.record_attempt(claim)
        result = self.adapter_for(claim).send(
            key=self.key_for_attempt(claim, attempt),
            destination=claim.destination,
            run_id=claim.run_id,
            delivery_id=claim.delivery_id,
            body=claim.body,
            recognizer=claim.recognizer,
        )
        if result.answer is Answer.ACCEPTED:
            boundary("after_provider_accept")
            assert result.provider_message_id is not None
            self.ledger.persist_accepted(claim, result.provider_message_id, how="accepted")
            boundary("after_response_persisted")
            self.finish(claim)
        elif result.answer is Answer.UNKNOWN:
            self.waited_out(result.detail)
            self.ledger.persist_unknown(claim, result.detail, retry_in=self.config.backoff(attempt))
            boundary("after_response_persisted")
        elif result.answer is Answer.RETRYABLE:
            delay = max(self.config.backoff(attempt), result.retry_after_s or 0.0)
            self.ledger.persist_retry(claim, result.detail, retry_in=delay)
            boundary("after_response_persisted")
        else:
            self.ledger.persist_terminal(claim, "failed", result.detail)
            boundary("after_response_persisted")
            self.cleanup(claim)

    def waited_out(self, detail: str) -> None:
        """A request that timed out kept this worker waiting its whole timeout: that time
        went by on the clock too (a no-op on wall time; on the harness's case clock it is
        what keeps a provider's slow reply and the worker's retry in the order real time
        would give them)."""
        if "Timeout" in detail or "timed out" in detail:
            self.clock.waited(self.config.request_timeout_s)

    def finish(self, claim: Claim) -> None:
        self.ledger.acknowledge(claim)
        boundary("after_ack")
        self.cleanup(claim)

    def cleanup(self, claim: Claim) -> None:
        self.ledger.cleanup(claim.delivery_id)
        boundary("after_cleanup")


def main(config: WorkerConfig) -> None:
    """Entry point the supervisor calls in a forked child."""
    ReferenceWorker(config).run()
