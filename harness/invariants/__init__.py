"""One checker module per SPEC invariant, and the runner that makes a raise *unknown*.

Each module exposes ``NAME`` and ``check(observation) -> CheckResult``. Adding an invariant
means adding a module and listing it in ``CHECKERS``; nothing else changes.
"""

from __future__ import annotations

import traceback
from contextvars import ContextVar

from harness.invariants import (
    accepted_reconciled_or_unknown,
    audit_survives_cleanup,
    content_matches_ledger,
    credential_scope,
    delivered_has_receipt,
    exactly_once_effect,
    frozen_destinations,
    liveness,
    no_restart_duplicates,
    no_silent_loss,
    no_unintended_effect,
    one_delivery_identity,
    restore_no_replay,
    retry_after_honoured,
    retry_within_window,
    stable_idempotency_key,
    states_distinguishable,
)
from harness.invariants._model import (
    NOT_JUDGED,
    AuditRow,
    Checker,
    CheckResult,
    DeliveryRow,
    EffectRow,
    LedgerSnapshot,
    MissingEvidenceError,
    Observation,
    Policy,
    Status,
    StatusChange,
)

CHECKERS: dict[str, Checker] = {
    m.NAME: m.check
    for m in (
        one_delivery_identity,
        no_restart_duplicates,
        stable_idempotency_key,
        exactly_once_effect,
        no_unintended_effect,
        delivered_has_receipt,
        accepted_reconciled_or_unknown,
        no_silent_loss,
        audit_survives_cleanup,
        states_distinguishable,
        retry_within_window,
        retry_after_honoured,
        content_matches_ledger,
        frozen_destinations,
        liveness,
        credential_scope,
        restore_no_replay,
    )
}


#: True while a checker runs: evidence that a system cannot give raises only then (a report
#: or a timeline reading the same snapshot just sees an empty part)
JUDGING: ContextVar[bool] = ContextVar("crash_harness_judging", default=False)


def run_checker(name: str, checker: Checker, obs: Observation) -> CheckResult:
    """Run one checker; an exception is an *unknown* with the traceback as evidence."""
    token = JUDGING.set(True)
    try:
        return checker(obs)
    except MissingEvidenceError as exc:
        text = str(exc)
        summary = text if text.startswith(NOT_JUDGED) else f"{name} could not decide: {text}"
        return CheckResult(Status.UNKNOWN, summary, {"missing": text})
    except Exception as exc:
        return CheckResult(
            Status.UNKNOWN,
            f"{name} could not decide: {type(exc).__name__}: {exc}",
            {"traceback": traceback.format_exc(limit=8)},
        )
    finally:
        JUDGING.reset(token)


def run_all(obs: Observation, names: list[str] | None = None) -> dict[str, CheckResult]:
    chosen = names if names is not None else list(CHECKERS)
    return {name: run_checker(name, CHECKERS[name], obs) for name in chosen}


__all__ = [
    "CHECKERS",
    "AuditRow",
    "CheckResult",
    "DeliveryRow",
    "EffectRow",
    "LedgerSnapshot",
    "Observation",
    "Policy",
    "Status",
    "StatusChange",
    "run_all",
    "run_checker",
]
