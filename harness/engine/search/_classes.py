"""Which hits of a discovered point a sweep crashes: one per class, and a seeded sample of
the rest.

A sweep of every hit of every discovered point grows with what the worker's libraries do,
not with what the worker does: DBOS's ``launch()`` commits 81 times below one line of the
worker, a Huey consumer polls its schedule every second, a loop over 40 jobs commits 40
times from one line. Hits that went the same way (the same path through library code below
the worker's line, the same caller of that line, and a commit that wrote rows or one that
wrote none: ``harness.engine.store.trace.hit_classes``) are one **class**. The sweep
crashes the first hit of every class and a sample of the others, drawn from the run's
seed, and says how many hits it left out; ``--all-hits`` crashes every one.

A hit in no class (a named boundary's, a point a framework names, a far-side point) is
always crashed: those are the points a person placed or a framework step, never noise.
A hit the sweep left out is not covered, and not a pass: the report counts it apart.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: hits beyond one per class a sweep crashes unless told otherwise (``--sample``)
DEFAULT_SAMPLE = 10

Pair = tuple[str, int]


@dataclass(frozen=True)
class HitChoice:
    """What a sweep crashes out of the hits its dry run reached, and why."""

    #: the pairs to crash, in the dry run's order
    planned: list[Pair]
    #: pairs the dry run reached
    reached: int
    #: classes among them (a hit in no class counts as a class of its own)
    classes: int
    #: pairs crashed though their class already was: the seeded sample
    sampled: list[Pair] = field(default_factory=list)
    #: pairs left out: their class was crashed at another hit
    left_out: list[Pair] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "hits_reached": self.reached,
            "hit_classes": self.classes,
            "hits_sampled": len(self.sampled),
            "hits_left_out": len(self.left_out),
        }

    def sentence(self) -> str:
        """What the sweep crashed of its hits, as the console says it."""
        return describe(self.to_json())


def describe(counts: Mapping[str, object]) -> str:
    """``201 hits, 23 classes: 23 + 10 sampled, 168 left out, not covered (--all-hits
    crashes them)``, from the counts of a report's ``sweep``."""
    reached, classes = counts["hits_reached"], counts["hit_classes"]
    if not counts["hits_left_out"]:
        return f"{reached} hits, {classes} classes: every hit crashed"
    return (
        f"{reached} hits, {classes} classes: {classes} + {counts['hits_sampled']} sampled, "
        f"{counts['hits_left_out']} left out, not covered (--all-hits crashes them)"
    )


def choose(
    pairs: Sequence[Pair],
    classes: Mapping[str, Mapping[int, str]],
    *,
    seed: int,
    sample: int = DEFAULT_SAMPLE,
    all_hits: bool = False,
) -> HitChoice:
    """The first hit of every class, and ``sample`` of the others drawn from ``seed``."""
    if all_hits:
        return HitChoice(planned=list(pairs), reached=len(pairs), classes=len(pairs))
    firsts: list[Pair] = []
    others: list[Pair] = []
    seen: set[tuple[str, str]] = set()
    for point, hit in pairs:
        key = classes.get(point, {}).get(hit)
        if key is None:
            firsts.append((point, hit))
        elif (point, key) in seen:
            others.append((point, hit))
        else:
            seen.add((point, key))
            firsts.append((point, hit))
    drawn = random.Random(f"{seed}:sweep-sample").sample(others, min(max(sample, 0), len(others)))
    chosen = set(firsts) | set(drawn)
    return HitChoice(
        planned=[p for p in pairs if p in chosen],
        reached=len(pairs),
        classes=len(firsts),
        sampled=[p for p in others if p in set(drawn)],
        left_out=[p for p in others if p not in chosen],
    )
