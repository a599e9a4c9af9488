"""The base every preset derives from, the registry's record of one, and the core it gets.

A preset is the semantics of one kind of provider (dedupe window, lookup, rendered
surface) and nothing else; the core owns what must behave the same for all of them. This
is the seam between the two: what the core calls on a preset (``Preset``), and what a
preset may call on the core (``Core``, which ``ProviderApp`` is), so neither side needs
the other's module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt
from fake_providers._credentials import Credential
from fake_providers._effect_log import EffectLog
from fake_providers._identify import Identify
from fake_providers._options import IDENTIFY_OPTION, Option, resolve_options
from fake_providers._records import FaultRule
from fake_providers._reply import Reply
from fake_providers._routing import Route


class Core(Protocol):
    """The services of the core a preset may call (``ProviderApp`` provides them)."""

    @property
    def spec(self) -> PresetSpec: ...

    @property
    def log(self) -> EffectLog: ...

    @property
    def credentials(self) -> Mapping[str, Credential]: ...

    @property
    def lock(self) -> threading.Lock:
        """Held while a decision reads and changes what other requests see."""
        ...

    @property
    def epoch(self) -> int: ...

    def now(self) -> float: ...

    def mint_id(self, attempt: Attempt, prefix: str, nbytes: int = 8) -> str: ...

    def bearer_credential(self, request: Request) -> Credential | None: ...

    def bearer_or_reason(self, request: Request) -> Credential | str: ...

    def append(
        self,
        attempt: Attempt,
        *,
        outcome: str,
        status: int | None,
        fault: str | None = None,
        provider_message_id: str | None = None,
        response_body: str | None = None,
        content: str | None = None,
        received_at: float | None = None,
        epoch: int | None = None,
        reason: str | None = None,
    ) -> None: ...

    def record(
        self,
        attempt: Attempt,
        *,
        outcome: str,
        status: int,
        payload: Mapping[str, Any] | str,
        headers: Mapping[str, str] | None = None,
        fault: str | None = None,
        provider_message_id: str | None = None,
        save: bool = False,
        content: str | None = None,
        epoch: int | None = None,
        reason: str | None = None,
    ) -> Reply: ...

    def pick_fault(self, candidates: Sequence[Mapping[str, str | None]]) -> FaultRule | None: ...

    def enter_flight(self, attempt: Attempt, stage: str, *, due: float | None = None) -> int: ...

    def flight_stage(self, token: int, stage: str) -> None: ...

    def flight_epoch(self, token: int) -> int: ...

    def leave_flight(self, token: int) -> None: ...

    def claim_hold(self) -> bool: ...

    def hold_over(self, epoch: int) -> bool: ...

    def handle_message(self, request: Request) -> Reply: ...


class Preset:
    """Base of every preset: the semantics of one kind of provider, plugged into the core.

    ``core`` is the ``ProviderApp``; ``options`` are this instance's resolved options.
    """

    name: ClassVar[str] = ""

    def __init__(self, core: Core, options: Mapping[str, Any]) -> None:
        self.core = core
        self.options = dict(options)
        given = self.options.get("identify")
        #: the identification rule in force: the scenario's fields over the preset defaults
        self.identify: Identify = (given if isinstance(given, Identify) else Identify()).over(
            core.spec.identify
        )

    def routes(self) -> list[Route]:
        """Worker-facing URL rules (the admin API is added by the core)."""
        return []

    def start(self, host: str) -> dict[str, Any]:
        """Start any extra listener on ``host``; return extra fields for the ready line."""
        return {}

    def stop(self) -> None:
        """Stop what ``start`` started."""

    def info(self) -> dict[str, Any]:
        """Extra fields for ``GET /_admin/info``."""
        return {}


@dataclass(frozen=True)
class PresetSpec:
    """A preset as the registry knows it: name, what it models, options, factory."""

    name: str
    models: str
    options: tuple[Option, ...]
    factory: Callable[[Core, Mapping[str, Any]], Preset]
    identify: Identify = field(default_factory=Identify)
    """The preset's default identification rule (a scenario's rule overrides per field)."""

    def __post_init__(self) -> None:
        # Every preset takes an identification rule; the preset class holds its defaults.
        if not any(option.name == IDENTIFY_OPTION.name for option in self.options):
            object.__setattr__(self, "options", (*self.options, IDENTIFY_OPTION))

    def resolve(self, given: Mapping[str, object] | None) -> dict[str, Any]:
        """Validated options: defaults overlaid with ``given``."""
        return resolve_options(self.name, self.options, given)
