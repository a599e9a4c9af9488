"""Which step combinations land, learned from the schedules an explore has run.

The dry run says where a first step can land, but not how drawn steps combine: a pause
past the lease lets a rival finish the work, so whatever comes after it finds nothing to do
and never lands; a crash at the third hit of a boundary the recovery reaches once never
comes. A schedule with a step that does not land tests nothing (it is listed, never counted
as a pass), and on the reference half of the drawn schedules were such.

So each finished schedule's evidence (its step records and every incarnation's boundary
hits) is remembered, and a schedule drawn later is skipped before it runs when what was
seen says one of its steps will not land:

- a step that missed after the same previous step (or first) and never landed there;
- a step at a hit of a boundary the worker after the same previous step (or the same fault
  at the same place; after a fault other than a crash, which lets its worker finish, any
  step of that fault) never reached when it ran to its end;
- any step after a previous step that left the next worker nothing to do (it reached no
  boundary at all), unless some step after that one did land; after two such sightings
  of one fault kind with no counter-example, any step of that kind is taken to do the same;
- a step past what the worker restarted after the same crash reached when it ran to its
  end (learned from a schedule whose last step was that crash, landed);
- a provider fault with no boundary after another one whose rule took its request before
  (both aim at the case's n-th request; the first rule wins).

Only a prediction from evidence skips a draw; a schedule with nothing known runs.
"""

from __future__ import annotations

import re
from collections import Counter

from harness.engine.plan.schedule import CaseSpec, Step
from harness.engine.process.supervisor import OutcomeKind
from harness.engine.results import CaseResult, Landing

#: the worker a step was armed on, as the step's record names it (``w3 reached ...``)
_WORKER = re.compile(r"^(w\d+) reached ")
#: the worker a crash landed on, as its record names it (``w2 killed at ...``)
_KILLED = re.compile(r"^w(\d+) (?:process )?killed ")
#: a race that found nobody to race: the work was done before it
_NOBODY = "only 0 of "
#: sightings of a fault kind leaving nothing to do, with none against, that stand for the kind
KIND_EVIDENCE = 2
#: a provider fault whose request another rule took first (``harness.faults.provider``)
_TAKEN = "another fault rule"


class Landings:
    """What explore has learned about which steps land after which."""

    def __init__(self) -> None:
        self.landed: Counter[tuple[str | None, str]] = Counter()
        self.missed: Counter[tuple[str | None, str]] = Counter()
        #: previous step -> times the next step's worker found nothing / found work
        self.emptied: Counter[str] = Counter()
        self.followed: Counter[str] = Counter()
        self.emptied_kind: Counter[str] = Counter()
        self.followed_kind: Counter[str] = Counter()
        #: previous step (and its fault at its boundary) -> every boundary hit of the next
        #: worker, which ran to its end
        self.reach_after: dict[str, dict[str, int]] = {}
        self.reach_after_place: dict[str, dict[str, int]] = {}
        #: a fault other than a crash lets its worker finish: the next worker's reach after
        #: any step of that fault, the most seen at each boundary
        self.reach_after_kind: dict[str, dict[str, int]] = {}
        #: a step with no boundary (a race, a slow reply), wherever it came
        self.landed_anywhere: Counter[str] = Counter()
        self.missed_anywhere: Counter[str] = Counter()
        #: (fault of an earlier step with no boundary, fault of a later one) -> times the later
        #: one's request was taken by the earlier one's rule / times it landed all the same
        self.taken: Counter[tuple[str, str]] = Counter()
        self.not_taken: Counter[tuple[str, str]] = Counter()
        #: schedules skipped before they ran
        self.skipped = 0
        #: schedules run: one is never skipped (Hypothesis replays a failure to shrink it)
        self.ran: set[str] = set()

    def learn(self, result: CaseResult) -> None:
        """Remember what became of each step of a finished schedule."""
        self.ran.add(result.spec.id)
        steps = result.spec.steps
        self._learn_reach_after_last(result)
        self._learn_taken_requests(result)
        for i, (step, record) in enumerate(zip(steps, result.step_records, strict=False)):
            prev = str(steps[i - 1]) if i else None
            key = (prev, str(step))
            if record.landed:
                self.landed[key] += 1
                self.landed_anywhere[str(step)] += 1
                if prev is not None:
                    self.followed[prev] += 1
                    self.followed_kind[steps[i - 1].fault] += 1
                continue
            if record.landing not in (Landing.NOT_REACHED, Landing.UNCONFIRMED):
                continue
            self.missed[key] += 1
            self.missed_anywhere[str(step)] += 1
            found = _WORKER.match(record.detail)
            if prev is not None and found is not None:  # it ran to its end: its whole reach
                reach = dict(result.hits_by_worker.get(found.group(1), {}))
                self.reach_after[prev] = reach
                self.reach_after_place[_place(steps[i - 1])] = reach
                most = self.reach_after_kind.setdefault(steps[i - 1].fault, {})
                for boundary, hits in reach.items():
                    most[boundary] = max(most.get(boundary, 0), hits)
            if prev is not None and self._nothing_left(result, record.detail):
                self.emptied[prev] += 1
                self.emptied_kind[steps[i - 1].fault] += 1

    def _learn_taken_requests(self, result: CaseResult) -> None:
        """Provider faults with no boundary are armed at the case's start, each on the n-th
        request: two of them on one schedule aim at the same request, and the first rule
        takes it. Seen once, the pair of kinds is known not to land together (until a
        schedule shows otherwise)."""
        steps = result.spec.steps
        for i, (step, record) in enumerate(zip(steps, result.step_records, strict=False)):
            if step.boundary is not None:
                continue
            earlier = {s.fault for s in steps[:i] if s.boundary is None}
            for fault in earlier:
                if record.landed:
                    self.not_taken[(fault, step.fault)] += 1
                elif _TAKEN in record.detail:
                    self.taken[(fault, step.fault)] += 1

    def _learn_reach_after_last(self, result: CaseResult) -> None:
        """A schedule whose last step is a crash that landed shows, in the worker restarted
        after it and left to run to its end, where a worker gets after that crash: a later
        draw that adds a step beyond that reach is known not to land before it is tried (a
        miss teaches the same, but only once it has been paid for)."""
        steps, records = result.spec.steps, result.step_records
        if not steps or len(records) != len(steps) or any(s.fault != "crash" for s in steps):
            return  # only crashes: one worker at a time, each the restart of the one before
        last = records[-1]
        killed = _KILLED.match(last.detail)
        if not last.landed or killed is None:
            return
        after = f"w{int(killed.group(1)) + 1}"
        if [w.worker for w in result.workers][-1:] != [after]:
            return  # the worker after the crash is not the last one: its reach is not whole
        if [w.kind for w in result.workers if w.worker == after] != [OutcomeKind.COMPLETED]:
            return  # it did not run to its end
        reach = dict(result.hits_by_worker.get(after, {}))
        self.reach_after.setdefault(str(steps[-1]), reach)
        self.reach_after_place.setdefault(_place(steps[-1]), reach)

    @staticmethod
    def _nothing_left(result: CaseResult, detail: str) -> bool:
        if detail.startswith(_NOBODY):
            return True
        found = _WORKER.match(detail)
        if found is None:
            return False
        return sum(result.hits_by_worker.get(found.group(1), {}).values()) == 0

    def may_land(self, spec: CaseSpec) -> bool:
        """False when what was seen says some step of ``spec`` will not land."""
        if spec.id in self.ran:
            return True
        steps = spec.steps
        for i, step in enumerate(steps):
            prev = str(steps[i - 1]) if i else None
            key = (prev, str(step))
            if self.landed[key]:
                continue  # it landed right here before: nothing says it will not again
            if step.boundary is None and any(
                self.taken[(s.fault, step.fault)] and not self.not_taken[(s.fault, step.fault)]
                for s in steps[:i]
                if s.boundary is None
            ):
                return False
            if self.missed[key]:
                return False
            if (
                step.boundary is None
                and self.missed_anywhere[str(step)] >= KIND_EVIDENCE
                and not self.landed_anywhere[str(step)]
            ):
                return False
            if prev is None:
                continue
            if self.emptied[prev] and not self.followed[prev]:
                return False
            reach = self.reach_after.get(prev, self.reach_after_place.get(_place(steps[i - 1])))
            if reach is None and steps[i - 1].fault != "crash":
                reach = self.reach_after_kind.get(steps[i - 1].fault)
            if (
                reach is not None
                and step.boundary is not None
                and reach.get(step.boundary, 0) < (step.hit or 1)
            ):
                return False
            kind = steps[i - 1].fault
            if (
                not self.followed[prev]
                and self.emptied_kind[kind] >= KIND_EVIDENCE
                and not self.followed_kind[kind]
            ):
                return False
        return True


def _place(step: Step) -> str:
    """A step's fault at its boundary and hit, whatever its size or variant: what decides
    where the worker after it can still go."""
    return f"{step.fault}@{step.boundary}#{step.hit}"
