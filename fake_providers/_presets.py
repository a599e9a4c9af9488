"""The preset registry: preset name -> ``PresetSpec`` (one module per preset).

Adding a preset means adding one module under ``fake_providers/presets/`` that exports
``SPEC`` and listing it here; the core, the CLI and ``ProviderProcess`` pick it up.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fake_providers._errors import ProviderError
from fake_providers._options import Option
from fake_providers._preset import PresetSpec
from fake_providers.presets import chat, orders, payments, queue_fifo, smtp, webhook

PRESETS: Mapping[str, PresetSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            payments.SPEC,
            orders.SPEC,
            queue_fifo.SPEC,
            chat.SPEC,
            smtp.SPEC,
            webhook.SPEC,
        )
    }
)


def get_preset(name: str) -> PresetSpec:
    """Return the preset called ``name`` or raise ``ProviderError`` naming the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise ProviderError(f"unknown preset {name!r}; known presets: {known}") from None


def all_options() -> dict[str, tuple[Option, list[str]]]:
    """Every option name across presets, with its declaration and the presets that take it.

    Presets sharing a name must agree on its kind (one CLI flag serves them all).
    """
    out: dict[str, tuple[Option, list[str]]] = {}
    for spec in PRESETS.values():
        for option in spec.options:
            if option.name in out:
                known, users = out[option.name]
                if known.kind != option.kind:
                    raise ProviderError(f"option {option.name!r} has two kinds across presets")
                users.append(spec.name)
            else:
                out[option.name] = (option, [spec.name])
    return out
