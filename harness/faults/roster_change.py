"""``roster_change``: the destination roster changes between a crash and the restart.

Runs whose result was committed before the change must still go to the list frozen at
commit; runs committed after it legitimately go to the new roster. The harness records
which runs were committed when it changed the roster, so the intent stays exact.

``:ARG`` picks how the roster changes, on every topic (``VARIANTS``; none: the default):

- (none) drop the first destination and add a newcomer;
- ``add`` / ``drop``: only add a newcomer / only drop the first destination;
- ``respell_case`` / ``respell_space`` / ``respell_nfd``: replace one destination by
  another spelling of it (first letters of local part and domain case-swapped; surrounding
  whitespace; the other Unicode normal form, NFC <-> NFD);
- ``dup_case`` / ``dup_space`` / ``dup_nfd``: add that other spelling *next to* the old one,
  so the roster lists one person twice.

Whether a re-spelling is the same recipient is the surface's call (``harness.destinations``):
on SMTP all three are; where ids are case-sensitive (payments, chat, ...) a case change is
another destination. The checkers judge by that normal form, so a worker that sends to both
spellings of one person is a duplicate, and one that sends to the new spelling instead of
the frozen one reached the same person. The default workload's addresses are ASCII, where
NFC and NFD agree, so the ``*_nfd`` variants first (before any worker starts) give one
destination per topic an accented letter, written precomposed (NFC); that is the roster the
case starts from, and what its runs intend.

The fault works on any system that declares a roster (``System.roster``, a
``harness.intake.Roster``; the intake table unless it says otherwise): the roster is read and
changed through it, and which runs were committed before the change is read from the
system's own ledger snapshot (``read_ledger``: committed runs and frozen destination lists).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from harness.destinations import distinct
from harness.engine.case._context import CaseContext
from harness.engine.plan.schedule import Step
from harness.engine.process._boundary import Arm
from harness.errors import BadInputError
from harness.faults._args import ArgError
from harness.faults._spec import FaultSpec, not_reached, place
from harness.intake import INTAKE_ROSTER, Roster

#: every ``:ARG`` roster_change takes (None: the default, drop one and add one)
VARIANTS: tuple[str | None, ...] = (
    None,
    "add",
    "drop",
    "respell_case",
    "respell_space",
    "respell_nfd",
    "dup_case",
    "dup_space",
    "dup_nfd",
)

#: the precomposed (NFC) accented form of a vowel, for the ``*_nfd`` set-up
_ACUTE = {c: unicodedata.normalize("NFC", c + "\u0301") for c in "aeiouyAEIOUY"}


def _swap_first_letters(dest: str) -> str:
    """``alice@example.com`` -> ``Alice@Example.com``: the first letter of each part swapped."""
    local, at, domain = dest.partition("@")
    return local[:1].swapcase() + local[1:] + at + domain[:1].swapcase() + domain[1:]


def _other_normal_form(dest: str) -> str:
    nfc = unicodedata.normalize("NFC", dest)
    return nfc if nfc != dest else unicodedata.normalize("NFD", dest)


_RESPELL: dict[str, Callable[[str], str]] = {
    "case": _swap_first_letters,
    "space": lambda dest: f" {dest} ",
    "nfd": _other_normal_form,
}


def check_arg(arg: str) -> str:
    """``validate_cases``' check: the variant must be one this fault knows."""
    if arg not in VARIANTS:
        known = ", ".join(v for v in VARIANTS if v is not None)
        raise ArgError(f"a roster change ({known})", arg)
    return arg


def _parse(step: Step) -> str | None:
    if step.arg not in VARIANTS:
        known = ", ".join(v for v in VARIANTS if v is not None)
        raise BadInputError(f"{step}: ':{step.arg}' is not a roster change; known: {known}")
    return step.arg


def accented(dest: str) -> str:
    """``dest`` with its first vowel given an acute accent, precomposed (``zoe`` -> ``zoé``);
    a name without one gets a leading ``é``."""
    for i, c in enumerate(dest.partition("@")[0]):
        if c in _ACUTE:
            return dest[:i] + _ACUTE[c] + dest[i + 1 :]
    return _ACUTE["e"] + dest


def give_accents(
    engine: Engine, topics: list[str], roster: Roster = INTAKE_ROSTER
) -> dict[str, tuple[str, ...]]:
    """Before any worker starts: rewrite the first destination of each topic whose roster has
    no character NFC and NFD spell differently; return each topic's roster after that."""
    rosters: dict[str, tuple[str, ...]] = {}
    with Session(engine) as s, s.begin():
        for topic in sorted(topics):
            current = roster.destinations(s, topic)
            if current and all(_other_normal_form(d) == d for d in current):
                roster.rename(s, topic, current[0], accented(current[0]))
                current[0] = accented(current[0])
            rosters[topic] = tuple(sorted(current))
    return rosters


def _plan(
    topic: str, current: list[str], variant: str | None, respelled: list[dict[str, str]]
) -> tuple[list[str], list[str]]:
    """What leaves and what joins one topic's roster (``current``, sorted) under ``variant``."""
    kind = variant.partition("_")[2] if variant else ""
    if variant is not None and kind in _RESPELL:
        respell = _RESPELL[kind]
        old = next((d for d in current if respell(d) not in (d, *current)), None)
        if old is None:  # e.g. an earlier change dropped the only accented name: no change
            return [], []
        new = respell(old)
        respelled.append({"topic": topic, "from": old, "to": new})
        return ([old] if variant.startswith("respell_") else []), [new]
    gone = current[:1] if variant in (None, "drop") else []
    joining: list[str] = []
    if variant in (None, "add"):
        joiners = sum(1 for d in current if d.startswith("late-joiner"))
        joining.append(f"late-joiner-{joiners + 1}.{topic}@example.org")
    return gone, joining


def change_roster(
    engine: Engine,
    topics: list[str],
    variant: str | None = None,
    *,
    roster: Roster = INTAKE_ROSTER,
    committed: frozenset[str] = frozenset(),
) -> dict[str, object]:
    """Change every topic's roster as ``variant`` says; return what changed.

    Reads the roster as it is *now*, so a second change in one case builds on the first.
    ``committed`` are the runs the system had committed (their destination lists frozen).
    """
    added: list[str] = []
    removed: list[str] = []
    respelled: list[dict[str, str]] = []
    new_roster: dict[str, tuple[str, ...]] = {}
    with Session(engine) as s, s.begin():
        for topic in sorted(topics):
            current = roster.destinations(s, topic)
            gone, joining = _plan(topic, current, variant, respelled)
            for dest in gone:
                roster.remove(s, topic, dest)
            for dest in joining:
                roster.add(s, topic, dest)
            removed.extend(gone)
            added.extend(joining)
            now = [d for d in current if d not in gone] + joining
            new_roster[topic] = tuple(sorted(now))
    change: dict[str, object] = {
        "added": added,
        "removed": removed,
        "committed_before": sorted(committed),
        "new_roster": {k: list(v) for k, v in new_roster.items()},
    }
    if variant is not None:
        change["variant"] = variant
    if respelled:
        change["respelled"] = respelled
    return change


def _roster_of(ctx: CaseContext, step: Step) -> Roster:
    if ctx.system.roster is None:
        raise BadInputError(f"{step}: system {ctx.system.name!r} declares no roster to change")
    return ctx.system.roster


def _committed(ctx: CaseContext, engine: Engine) -> frozenset[str]:
    """The runs the system committed, by its own ledger: their destination lists are frozen."""
    ledger = ctx.system.read_ledger(engine)
    return frozenset(ledger.committed_runs) | frozenset(ledger.frozen_destinations)


def prepare(ctx: CaseContext, step: Step) -> None:
    """Refuse an unknown variant or a system without a roster before any worker starts; set
    up the ``*_nfd`` roster."""
    variant = _parse(step)
    roster = _roster_of(ctx, step)
    if variant is None or not variant.endswith("_nfd"):
        return
    rosters = ctx.with_engine(lambda e: give_accents(e, list(ctx.workload.roster), roster))
    for run_spec in ctx.workload.runs:
        ctx.intended[run_spec.run_id] = rosters[run_spec.topic]
    ctx.record("roster_setup", roster={k: list(v) for k, v in rosters.items()})


def run(ctx: CaseContext, step: Step) -> None:
    boundary, hit = place(step)
    variant = _parse(step)
    roster = _roster_of(ctx, step)
    worker = ctx.spawn([Arm(boundary, hit)])
    outcome = ctx.wait(worker)
    if ctx.crash_event(worker, step) is None:
        if outcome.ended_normally:
            not_reached(ctx, step, worker)
        return
    topics = list(ctx.workload.roster)
    change = ctx.with_engine(
        lambda e: change_roster(e, topics, variant, roster=roster, committed=_committed(ctx, e))
    )
    committed = set(change["committed_before"])
    new_roster = change["new_roster"]
    surface = ctx.base_config.provider_preset
    for run_spec in ctx.workload.runs:
        if run_spec.run_id not in committed:
            # A roster listing one person twice intends one message to them.
            ctx.intended[run_spec.run_id] = tuple(distinct(new_roster[run_spec.topic], surface))
    ctx.record("roster_change", **change)
    if not change["added"] and not change["removed"]:
        ctx.not_landed(step, f"{variant or 'the default change'} found nothing to change")
        return
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
    prepare=prepare,
    check_arg=check_arg,
    arg_help="how the roster changes: add, drop, respell_case, respell_space, respell_nfd, "
    "dup_case, dup_space, dup_nfd (default: drop one, add one)",
)
