"""The work a campaign asks of the system: runs, a roster, and provider faults, all from a seed.

The default workload is small but not gentle: one send is accepted and then its reply is
dropped (so the worker must reconcile) and one is refused with a 503 (so it must retry).
A fault-free dry run therefore reaches every SPEC boundary, including ``before_reconcile``
and ``before_retry``, and a crash can be placed at each.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from faker import Faker
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from harness.intake import INTAKE_ROSTER, Roster, RunRequest


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
