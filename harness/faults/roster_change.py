"""``roster_change``: the destination roster changes between a crash and the restart.

Runs whose result was committed before the change must still go to the list frozen at
commit; runs committed after it legitimately go to the new roster. The harness records
which runs were committed when it changed the roster, so the intent stays exact.
"""

from __future__ import annotations

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from harness._boundary import Arm
from harness._case import CaseContext
from harness.faults._spec import FaultSpec, not_reached, place
from harness.reference.schema import Execution, RosterEntry, RunDestination
from harness.schedule import Step
from harness.supervisor import OutcomeKind


def change_roster(engine: Engine, topics: list[str]) -> dict[str, object]:
    """Drop the first destination of every topic and add a newcomer; return what changed.

    Reads the roster as it is *now*, so a second change in one case builds on the first.
    """
    added: list[str] = []
    removed: list[str] = []
    new_roster: dict[str, tuple[str, ...]] = {}
    with Session(engine) as s, s.begin():
        committed = set(
            s.scalars(
                select(Execution.run_id).where(Execution.execution_status == "committed")
            ).all()
        )
        frozen_runs = set(s.scalars(select(RunDestination.run_id)).all())
        for topic in sorted(topics):
            current = sorted(
                s.scalars(select(RosterEntry.destination).where(RosterEntry.topic == topic))
            )
            joiners = sum(1 for d in current if d.startswith("late-joiner"))
            newcomer = f"late-joiner-{joiners + 1}.{topic}@example.org"
            kept = current[1:] if current else []
            if current:
                gone = current[0]
                s.execute(
                    delete(RosterEntry).where(
                        RosterEntry.topic == topic, RosterEntry.destination == gone
                    )
                )
                removed.append(gone)
            s.add(RosterEntry(topic=topic, destination=newcomer))
            added.append(newcomer)
            new_roster[topic] = tuple(sorted((*kept, newcomer)))
    return {
        "added": added,
        "removed": removed,
        "committed_before": sorted(committed | frozen_runs),
        "new_roster": {k: list(v) for k, v in new_roster.items()},
    }


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    worker = ctx.spawn([Arm(boundary, hit)])
    outcome = ctx.wait(worker)
    if ctx.crash_event(worker, step) is None:
        if outcome.kind is OutcomeKind.COMPLETED:
            not_reached(ctx, step, worker)
        return
    change = ctx.with_engine(lambda e: change_roster(e, list(ctx.workload.roster)))
    committed = set(change["committed_before"])
    new_roster = change["new_roster"]
    for run_spec in ctx.workload.runs:
        if run_spec.run_id not in committed:
            ctx.intended[run_spec.run_id] = tuple(new_roster[run_spec.topic])
    ctx.record("roster_change", **change)
    ctx.landed(
        step,
        f"{worker.name} killed at {boundary}#{hit}; roster changed: +{len(change['added'])}"
        f" -{len(change['removed'])}",
        worker=worker,
    )


FAULT = FaultSpec(
    id="roster_change",
    summary="crash at a boundary, change the roster, then restart",
    needs_boundary=True,
    run=run,
)
