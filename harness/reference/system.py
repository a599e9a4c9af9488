"""The reference system as the harness finds it: ``harness.reference.system:SYSTEM``.

Built from the public API only (``harness.systems.System``), as a user's own system is; the
harness names it ``reference`` through its registry of subjects (``harness.systems``).
"""

from __future__ import annotations

from sqlalchemy import Engine

from harness.reference import adapters, schema, snapshot, worker
from harness.systems import System


def prepare(engine: Engine) -> None:
    """Create the intake tables and the reference ledger (one ``create_all``)."""
    schema.Base.metadata.create_all(engine)


SYSTEM = System(
    name="reference",
    description="the ledger and worker that do it right",
    main=worker.main,
    prepare=prepare,
    read_ledger=snapshot.read_ledger,
    presets=adapters.PRESET_FACTS,
    speaks=adapters.PRESETS,
)
