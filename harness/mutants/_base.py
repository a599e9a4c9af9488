"""Build a mutant System from a ReferenceWorker subclass."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from harness.reference import adapters, schema, snapshot
from harness.reference.worker import ReferenceWorker
from harness.systems import System
from harness.worker_config import WorkerConfig


def mutant_system(
    name: str,
    worker_cls: type[ReferenceWorker],
    *,
    expected_violation: str,
    prepare: Callable[[Engine], None] | None = None,
    catching_scenario: str | None = None,
    config_overrides: dict[str, object] | None = None,
) -> System:
    def main(config: WorkerConfig) -> None:
        worker_cls(config).run()

    def default_prepare(engine: Engine) -> None:
        schema.Base.metadata.create_all(engine)

    return System(
        name=f"mutant:{name}",
        description=(worker_cls.__doc__ or "").strip().splitlines()[0],
        main=main,
        prepare=prepare or default_prepare,
        read_ledger=snapshot.read_ledger,
        expected_violation=expected_violation,
        catching_scenario=catching_scenario,
        config_overrides=config_overrides or {},
        presets=adapters.PRESET_FACTS,
        speaks=adapters.PRESETS,  # a reference worker: its adapters are all it speaks
    )
