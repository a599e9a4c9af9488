"""The work a campaign asks of the system: runs, a roster, and provider faults, all from a seed.

The default workload is small but not gentle: one send is accepted and then its reply is
dropped (so the worker must reconcile) and one is refused with a 503 (so it must retry).
A fault-free dry run therefore reaches every SPEC boundary, including ``before_reconcile``
and ``before_retry``, and a crash can be placed at each.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faker import Faker
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from harness.engine.plan import _glue
from harness.errors import BadInputError
from harness.intake import INTAKE_ROSTER, Roster, RunRequest

if TYPE_CHECKING:
    from harness.engine.store._db import DatabaseTarget
    from harness.systems import System


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    topic: str
    payload: dict[str, str]


@dataclass(frozen=True)
class Workload:
    seed: int
    runs: tuple[RunSpec, ...]
    roster: dict[str, tuple[str, ...]]
    #: fault rules for the provider, in its admin API's JSON shape
    provider_faults: tuple[dict[str, Any], ...]

    def intended(self) -> dict[str, tuple[str, ...]]:
        """Each run's intended destinations: the roster of its topic when the case starts."""
        return {run.run_id: self.roster[run.topic] for run in self.runs}


def build_workload(seed: int, *, runs: int = 3, destinations_per_topic: int = 2) -> Workload:
    fake = Faker()
    fake.seed_instance(seed)
    rng = random.Random(seed)
    topics = [f"topic-{i}" for i in range(1, 3)]
    roster = {
        topic: tuple(sorted({fake.unique.email() for _ in range(destinations_per_topic)}))
        for topic in topics
    }
    specs = tuple(
        RunSpec(
            run_id=f"run-{seed}-{i:03d}",
            topic=topics[i % len(topics)],
            payload={
                "subject": fake.sentence(nb_words=5),
                "text": fake.paragraph(nb_sentences=2),
                "author": fake.name(),
            },
        )
        for i in range(runs)
    )
    pairs = [(s.run_id, d) for s in specs for d in roster[s.topic]]
    # Two distinct sends get a provider fault when the workload is big enough for both.
    picked = rng.sample(pairs, k=min(2, len(pairs) - 1)) if len(pairs) > 1 else []
    shapes: list[dict[str, Any]] = [
        {"fault": "accept_then_drop"},
        {"fault": "status", "status": 503},
    ]
    faults = tuple(
        {**shape, "match": {"run_id": run_id, "destination": dest}, "nth": 1, "times": 1}
        for shape, (run_id, dest) in zip(shapes, picked, strict=False)
    )
    return Workload(seed=seed, runs=specs, roster=roster, provider_faults=faults)


def seed_database(engine: Engine, workload: Workload, roster: Roster = INTAKE_ROSTER) -> None:
    """Write the run requests and the roster (where the system keeps it), as the outside
    world would before work starts."""
    with Session(engine) as s, s.begin():
        for topic, destinations in workload.roster.items():
            for dest in destinations:
                roster.add(s, topic, dest)
        for run in workload.runs:
            s.add(
                RunRequest(
                    run_id=run.run_id,
                    topic=run.topic,
                    input_payload=json.dumps(run.payload, sort_keys=True),
                )
            )


def case_intent(
    system: System, workload: Workload, target: DatabaseTarget
) -> dict[str, tuple[str, ...]]:
    """What the case intends to deliver: run -> destinations, fixed before any worker starts.

    A system that declares its intent from its own data (``System.intent``: a user's
    ``prepare`` that writes its own orders and returns their (run, destination) pairs, or a
    query over its tables) is judged against that, so none of the harness's jobs has to be
    copied into the user's tables; otherwise the workload's intent (every run to its topic's
    roster). Runs on the case's prepared and seeded database, once per case."""
    if system.intent is None:
        return dict(workload.intended())
    engine = target.engine()
    try:
        declared = _glue.call(f"system {system.name!r}: its intent", system.intent, engine)
    finally:
        engine.dispose()  # never fork with open connections
    if declared is None:
        return dict(workload.intended())
    return intent_pairs(declared, where=f"system {system.name!r}: its declared intent")


def intent_pairs(found: object, *, where: str) -> dict[str, tuple[str, ...]]:
    """``found`` (an iterable of (run_id, destination) pairs, or of mappings with those two
    keys) as run -> sorted destinations; anything else, or nothing at all, is bad input.

    An empty intent is refused: a case that intends nothing proves nothing about loss,
    and would pass ``no_silent_loss`` for a worker that sends nothing."""
    if isinstance(found, str | bytes | Mapping) or not isinstance(found, Iterable):
        raise BadInputError(
            f"{where} is a {type(found).__name__}; expected (run_id, destination) pairs"
        )
    intended: dict[str, set[str]] = {}
    for item in found:
        pair = (
            (item.get("run_id"), item.get("destination"))
            if isinstance(item, Mapping)
            else tuple(item)
            if isinstance(item, Iterable) and not isinstance(item, str | bytes)
            else (item,)
        )
        if len(pair) != 2 or not all(isinstance(v, str) and v for v in pair):
            raise BadInputError(
                f"{where} holds {item!r}; expected (run_id, destination) pairs of non-empty text"
            )
        run_id, destination = pair
        intended.setdefault(run_id, set()).add(destination)
    if not intended:
        raise BadInputError(
            f"{where} is empty; a case that intends no delivery proves nothing about loss"
        )
    return {run: tuple(sorted(dests)) for run, dests in sorted(intended.items())}
