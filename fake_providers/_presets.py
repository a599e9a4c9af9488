"""Provider presets: the knobs that make one fake provider behave like a kind of real one.

Only ``payments`` (Stripe-like idempotency keys with a dedupe window and a lookup endpoint)
exists today. Presets are plain data so that queue-fifo, chat, smtp or webhook can later be
added as further entries in ``PRESETS`` without touching the server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fake_providers._errors import ProviderError

DEFAULT_WINDOW_S = 86_400.0


@dataclass(frozen=True)
class Preset:
    """How one kind of provider treats idempotency keys.

    ``window_s``: how long (provider clock) a key is remembered after it was accepted.
    ``lookup``: whether ``GET /v1/messages?idempotency_key=K`` is served.
    """

    name: str
    window_s: float = DEFAULT_WINDOW_S
    lookup: bool = True

    def __post_init__(self) -> None:
        if self.window_s < 0:
            raise ProviderError(f"preset {self.name!r}: window_s must be >= 0, got {self.window_s}")

    def with_window(self, window_s: float | None) -> Preset:
        """Return this preset with its dedupe window overridden (``None`` keeps it)."""
        if window_s is None:
            return self
        return dataclasses.replace(self, window_s=float(window_s))


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        "payments": Preset(name="payments"),
    }
)


def get_preset(name: str) -> Preset:
    """Return the preset called ``name`` or raise ``ProviderError`` naming the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise ProviderError(f"unknown preset {name!r}; known presets: {known}") from None
