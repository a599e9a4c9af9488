"""Schedules: what a case injects, written as a short, replayable id.

A case id is a list of steps joined by ``+``; each step is ``FAULT[@BOUNDARY#HIT][:ARG]``
(a provider fault: ``FAULT[@PROVIDER][:ARG]``, an ``@`` with no ``#HIT`` naming a provider):

    baseline                                   no fault
    crash@after_claim#1                        SIGKILL at the 1st hit of after_claim, restart
    crash@after_claim#1+crash@before_reconcile#2   a second crash while the restart recovers
    pause_past_lease@after_claim#1             SIGSTOP past the lease, a rival claims, SIGCONT
    clock_jump@before_retry#1:90000            move every clock 25 h while paused there
    provider_5xx:2                             the provider answers 503 to the 2nd send
    provider_5xx@mail:2                        the provider named ``mail`` does (several
                                               providers: ``[provider.mail]``)
    crash@accepted.mail#2                      a point the harness found itself (dotted:
                                               KIND.WHERE), here the 2nd request that the
                                               provider ``mail`` logged, its reply held
    crash@after_send.worker.42#1               after the send made at worker.py line 42

Steps run in order, each on the worker incarnation that is current when it starts. The id is
the whole truth about a case: with the seed and the scenario it replays the case exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.errors import BadInputError

#: faults that run two or more workers at once
RACING_FAULTS = frozenset({"concurrent_claim"})

_STEP = re.compile(
    r"^(?P<fault>[a-z][a-z0-9_]*)"
    r"(?:@(?P<boundary>[a-z][a-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)#(?P<hit>[1-9][0-9]*)"
    r"|@(?P<provider>[a-z][a-z0-9_-]*))?"
    r"(?::(?P<arg>[A-Za-z0-9_.\-]+))?$"
)


#: the faults that may name the provider they hit (``provider_5xx@mail``)
PROVIDER_FAULT_PREFIX = "provider_"


@dataclass(frozen=True)
class Step:
    fault: str
    boundary: str | None = None
    hit: int | None = None
    arg: str | None = None
    #: the provider a provider fault hits (``@NAME``); None: the campaign's first provider
    provider: str | None = None

    def __str__(self) -> str:
        text = self.fault
        if self.boundary is not None:
            text += f"@{self.boundary}#{self.hit}"
        if self.provider is not None:
            text += f"@{self.provider}"
        if self.arg is not None:
            text += f":{self.arg}"
        return text

    @classmethod
    def parse(cls, text: str) -> Step:
        m = _STEP.match(text)
        # ``@NAME`` with no ``#HIT`` names a provider, which only a provider fault hits:
        # ``crash@after_claim`` is a place missing its hit, and said so
        if m and m.group("provider") and not m.group("fault").startswith(PROVIDER_FAULT_PREFIX):
            m = None
        if not m:
            raise BadInputError(
                f"case step {text!r} is not FAULT[@BOUNDARY#HIT][:ARG] (e.g. crash@after_claim#1)"
                " or FAULT[@PROVIDER][:ARG] (e.g. provider_5xx@mail:2)"
            )
        hit = m.group("hit")
        return cls(
            m.group("fault"),
            m.group("boundary"),
            int(hit) if hit else None,
            m.group("arg"),
            m.group("provider"),
        )


class CaseSpec:
    """One case: the steps it injects, in order (none for the baseline)."""

    __slots__ = ("steps",)

    def __init__(
        self,
        fault: str = "none",
        boundary: str | None = None,
        hit: int | None = None,
        *,
        steps: tuple[Step, ...] | None = None,
    ) -> None:
        if steps is None:
            steps = () if fault == "none" else (Step(fault, boundary, hit),)
        self.steps: tuple[Step, ...] = steps

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaseSpec) and other.steps == self.steps

    def __hash__(self) -> int:
        return hash(self.steps)

    def __repr__(self) -> str:
        return f"CaseSpec({self.id!r})"

    @property
    def id(self) -> str:
        return "+".join(str(s) for s in self.steps) if self.steps else "baseline"

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.id.lower()).strip("_")[:80]

    @property
    def fault(self) -> str:
        """The SPEC fault id of this case (two or more crashes: ``crash_during_recovery``)."""
        if not self.steps:
            return "none"
        if len(self.steps) > 1 and all(s.fault == "crash" for s in self.steps):
            return "crash_during_recovery"
        return self.steps[0].fault

    @property
    def boundary(self) -> str | None:
        return self.steps[0].boundary if self.steps else None

    @property
    def hit(self) -> int | None:
        return self.steps[0].hit if self.steps else None

    @property
    def races(self) -> bool:
        """Whether workers of this case run side by side (``concurrent_claim``): then which
        send comes N-th, who claims which item and how often each boundary is reached are
        the race's outcome, not the seed's. A fault never picks its target by that order."""
        return any(s.fault in RACING_FAULTS for s in self.steps)

    @property
    def crashes(self) -> list[Step]:
        return [s for s in self.steps if s.fault == "crash"]

    @classmethod
    def parse(cls, text: str) -> CaseSpec:
        text = text.strip()
        if text == "baseline":
            return cls()
        if not text:
            raise BadInputError("empty case id; expected 'baseline' or e.g. crash@after_claim#1")
        return cls(steps=tuple(Step.parse(part) for part in text.split("+")))
