"""The plan a campaign runs, and the check that refuses a bad one before anything runs.

``default_cases`` is certify's plan (a baseline, then a crash at the first hit of every
boundary the system declares); ``validate_cases`` refuses a step naming a fault, boundary or
``:ARG`` that does not exist, never a silent no-op. Scenario files, reports and campaigns all
ask this module, so none of them imports the campaign for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.engine.plan.schedule import CaseSpec, Step
from harness.engine.process import _far_side
from harness.errors import BadInputError, UnknownBoundaryError
from harness.faults import FAULTS, FaultSpec
from harness.faults._args import ArgError
from harness.names import near_side_kind

if TYPE_CHECKING:
    from harness.systems import System

__all__ = ["default_cases", "validate_cases"]


def default_cases(system: System, providers: Sequence[str] = ()) -> list[CaseSpec]:
    """Certify's plan: the baseline, a crash at the first hit of every declared boundary,
    then a crash at the far-side point of each of ``providers`` (``accepted.NAME#1``: the
    first request that provider accepts, its reply held; ``harness.engine.process._far_side``).

    A discovered point that a helper makes for several of the worker's callers is crashed
    at the first hit from each caller too (``System.caller_hits``, from the dry run), so
    certify tries the gap after every use of the helper, not only after its first."""
    more: dict[str, list[int]] = {}
    for point, hit in system.caller_hits:
        more.setdefault(point, []).append(hit)
    declared = [
        CaseSpec("crash", b, hit) for b in system.boundaries for hit in [1, *more.get(b, ())]
    ]
    far = [CaseSpec("crash", _far_side.point(name), 1) for name in providers]
    known = {c.boundary for c in declared}
    return [CaseSpec(), *declared, *(c for c in far if c.boundary not in known)]


def validate_cases(
    system: System, cases: list[CaseSpec], providers: list[str] | None = None
) -> None:
    """Refuse a plan naming a fault, boundary or provider that does not exist: never a
    silent no-op. ``providers``: the campaign's provider names (None: not checked here)."""
    for case in cases:
        for step in case.steps:
            spec = FAULTS.get(step.fault)
            if spec is None:
                raise BadInputError(
                    f"case {case.id!r}: unknown fault {step.fault!r}; known faults: "
                    f"{', '.join(sorted(FAULTS))} (a step is FAULT[@BOUNDARY#HIT][:ARG], "
                    "e.g. crash@BOUNDARY#HIT)"
                )
            if spec.needs_boundary and step.boundary is None:
                raise BadInputError(
                    f"case {case.id!r}: {step.fault} needs a place: {step.fault}@BOUNDARY#HIT"
                )
            if not spec.needs_boundary and step.boundary is not None:
                raise BadInputError(f"case {case.id!r}: {step.fault} takes no @BOUNDARY#HIT")
            if _far_side.is_far_side(step.boundary):
                _check_far_side(case, step, providers)
            elif (
                step.boundary is not None
                and step.boundary not in system.boundaries
                and not (system.discover and near_side_kind(step.boundary))
            ):
                # a near-side point of a discovering system is known once a run reaches it:
                # one it never reaches is a step that did not land, never a pass
                raise UnknownBoundaryError(step.boundary, system.boundaries)
            if step.provider is not None and not spec.names_provider:
                raise BadInputError(
                    f"case {case.id!r}: {step.fault} takes no @PROVIDER (only provider faults"
                    " do); a place is @BOUNDARY#HIT"
                )
            if (
                step.provider is not None
                and providers is not None
                and step.provider not in providers
            ):
                raise BadInputError(
                    f"case {case.id!r}: step {step}: no provider named {step.provider!r};"
                    f" expected one of {', '.join(providers)}"
                )
            if step.arg is not None:
                _check_arg(case, step, spec)


def _check_far_side(case: CaseSpec, step: Step, providers: list[str] | None) -> None:
    """``accepted.NAME`` is a crash at a provider of the campaign, and nothing else."""
    assert step.boundary is not None
    name = _far_side.provider_of(step.boundary)
    if step.fault != "crash":
        raise BadInputError(
            f"case {case.id!r}: step {step}: a far-side point ({step.boundary}) takes only"
            f" crash (crash@{step.boundary}#{step.hit}), not {step.fault}"
        )
    if providers is not None and name not in providers:
        raise BadInputError(
            f"case {case.id!r}: step {step}: no provider named {name!r} for far-side point"
            f" {step.boundary!r}; expected accepted.PROVIDER with PROVIDER one of"
            f" {', '.join(providers)}"
        )


def _check_arg(case: CaseSpec, step: Step, spec: FaultSpec) -> None:
    """A step's ``:ARG`` means what its fault says, or the plan is refused before it runs."""
    assert step.arg is not None
    if spec.check_arg is None:
        raise BadInputError(
            f"case {case.id!r}: step {step}: expected no :ARG ({step.fault} takes none),"
            f" found {step.arg!r}"
        )
    try:
        spec.check_arg(step.arg)
    except ArgError as exc:
        raise BadInputError(
            f"case {case.id!r}: step {step}: expected {exc.expected}, found {exc.found!r}"
        ) from None
