"""One module per fault (SPEC ids); ``FAULTS`` maps an id to its ``FaultSpec``.

Adding a fault means adding a module with a ``FAULT`` (or ``FAULTS``) and listing it here.
"""

from __future__ import annotations

from harness.faults import (
    broker_restart,
    clock_jump,
    concurrent_claim,
    crash,
    db_restart,
    deploy,
    liveness,
    pause_past_lease,
    provider,
    restore_backup,
    roster_change,
)
from harness.faults._spec import FaultSpec

FAULTS: dict[str, FaultSpec] = {
    spec.id: spec
    for spec in (
        crash.FAULT,
        pause_past_lease.FAULT,
        concurrent_claim.FAULT,
        clock_jump.FAULT,
        roster_change.FAULT,
        restore_backup.FAULT,
        db_restart.FAULT,
        broker_restart.FAULT,
        deploy.FAULT,
        *provider.FAULTS,
        *liveness.FAULTS,
    )
}

__all__ = ["FAULTS", "FaultSpec"]
