"""The catalogue of broken workers: each one real mistake, each a small diff on the reference.

The harness must flag every mutant with its ``expected_violation`` and flag nothing on the
reference; ``tests/test_mutants.py`` holds it to that.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.mutants import (
    ack_before_send,
    backoff_past_window,
    blind_resend_after_timeout,
    body_per_run,
    cleanup_deletes_ledger,
    fire_and_forget_task,
    gives_up_on_throttle,
    ignores_key_window,
    ignores_retry_after,
    new_key_per_attempt,
    no_lease,
    no_watchdog,
    one_credential_for_all,
    recompute_destinations,
    resend_after_interrupted_recovery,
    sends_again_under_new_ids,
    shared_done_flag,
    swallows_db_error,
    transcript_rebuild,
    trusts_restored_ledger,
    unknown_as_failed,
    unknown_stored_as_pending,
    uuid_delivery_ids,
    wrong_receipt,
)
from harness.systems import System

CATALOGUE: dict[str, Callable[[], System]] = {
    "ack_before_send": ack_before_send.system,
    "new_key_per_attempt": new_key_per_attempt.system,
    "transcript_rebuild": transcript_rebuild.system,
    "blind_resend_after_timeout": blind_resend_after_timeout.system,
    "cleanup_deletes_ledger": cleanup_deletes_ledger.system,
    "unknown_as_failed": unknown_as_failed.system,
    "shared_done_flag": shared_done_flag.system,
    "backoff_past_window": backoff_past_window.system,
    "fire_and_forget_task": fire_and_forget_task.system,
    "ignores_key_window": ignores_key_window.system,
    "no_lease": no_lease.system,
    "no_watchdog": no_watchdog.system,
    "recompute_destinations": recompute_destinations.system,
    "resend_after_interrupted_recovery": resend_after_interrupted_recovery.system,
    "trusts_restored_ledger": trusts_restored_ledger.system,
    "one_credential_for_all": one_credential_for_all.system,
    "uuid_delivery_ids": uuid_delivery_ids.system,
    "unknown_stored_as_pending": unknown_stored_as_pending.system,
    "wrong_receipt": wrong_receipt.system,
    "gives_up_on_throttle": gives_up_on_throttle.system,
    "ignores_retry_after": ignores_retry_after.system,
    "body_per_run": body_per_run.system,
    "sends_again_under_new_ids": sends_again_under_new_ids.system,
    "swallows_db_error": swallows_db_error.system,
}
