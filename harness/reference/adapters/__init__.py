"""The reference worker's provider adapters, one module per preset, chosen by preset name.

``make_adapter(config)`` builds the adapter a worker speaks to its provider with;
``has_lookup(preset)`` is whether the reference asks the provider after a timeout;
``default_window_s(preset)`` is the dedupe window the worker must stay inside (None: no key);
``campaign_faults(preset, rules)`` restates HTTP fault rules in the preset's own terms (SMTP
answers DATA with SMTP codes: a 5xx/429 "try again" becomes 451). The preset facts come from
the public table (``harness.presets``); ``PRESET_FACTS`` is what the reference declares to
the harness (``System.presets``): that table, with the lookup its own adapters use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from harness import presets
from harness.errors import BadInputError
from harness.reference.adapters.base import ProviderAdapter, ReconcileTarget
from harness.reference.adapters.chat import ChatAdapter
from harness.reference.adapters.payments import PaymentsAdapter
from harness.reference.adapters.queue_fifo import QueueFifoAdapter
from harness.reference.adapters.smtp import SmtpAdapter
from harness.worker_config import WorkerConfig

__all__ = [
    "PRESETS",
    "PRESET_FACTS",
    "ProviderAdapter",
    "ReconcileTarget",
    "campaign_faults",
    "default_window_s",
    "effective_window_s",
    "has_lookup",
    "make_adapter",
    "takes_window",
]

_CLASSES: dict[str, type[Any]] = {
    "payments": PaymentsAdapter,
    "queue-fifo": QueueFifoAdapter,
    "chat": ChatAdapter,
    "smtp": SmtpAdapter,
}
#: the presets the reference worker speaks, in the order the docs list them
PRESETS: tuple[str, ...] = tuple(_CLASSES)


def _check(preset: str) -> None:
    if preset not in _CLASSES:
        raise BadInputError(
            f"the reference worker has no adapter for preset {preset!r}; "
            f"known: {', '.join(PRESETS)}"
        )


#: the preset facts the reference declares (``System.presets``): the public table, with
#: whether its own adapter for a preset asks the provider after a timeout
PRESET_FACTS: Mapping[str, presets.PresetFacts] = MappingProxyType(
    {
        **presets.PRESETS,
        **{
            name: replace(presets.facts_for(name), lookup=bool(cls.has_lookup))
            for name, cls in _CLASSES.items()
        },
    }
)


def has_lookup(preset: str) -> bool:
    """Can the provider be asked about a key after a timeout?"""
    return presets.facts_for(preset, PRESET_FACTS).lookup


def default_window_s(preset: str) -> float | None:
    """The preset's default dedupe window; None when it has no key (or is not known here)."""
    return presets.facts_for(preset, PRESET_FACTS).window_s


def takes_window(preset: str) -> bool:
    """Does the preset have a dedupe window (its ``window_s`` option)?"""
    return presets.facts_for(preset, PRESET_FACTS).keyed


def effective_window_s(preset: str, configured: float) -> float:
    """The window a worker may rely on.

    For payments the configured window is authoritative (its provider window is configurable
    and the worker is told the same); for queue-fifo it never exceeds SQS's 5 minutes, so a
    worker left on the 24 h default cannot resend after the queue forgot the id.
    """
    window = default_window_s(preset)
    if preset == "payments" or window is None:
        return configured
    return min(configured, window)


def make_adapter(config: WorkerConfig) -> ProviderAdapter:
    preset = config.provider_preset
    _check(preset)
    timeout = config.request_timeout_s
    if preset == "payments":
        return PaymentsAdapter(
            config.provider_url,
            config.credential_secret,
            timeout_s=timeout,
            window_s=effective_window_s(preset, config.key_window_s),
        )
    if preset == "queue-fifo":
        return QueueFifoAdapter(
            config.provider_url,
            config.credential_secret,
            timeout_s=timeout,
            window_s=effective_window_s(preset, config.key_window_s),
        )
    if preset == "chat":
        return ChatAdapter(config.provider_url, config.credential_secret, timeout_s=timeout)
    if config.provider_smtp_port is None:
        raise BadInputError("preset 'smtp' needs WorkerConfig.provider_smtp_port")
    return SmtpAdapter(
        config.provider_url,
        config.credential_secret,
        timeout_s=timeout,
        smtp_port=config.provider_smtp_port,
        username=config.credential_id,
    )


def campaign_faults(preset: str, rules: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Fault rules as the preset understands them (only SMTP differs: codes on DATA)."""
    return presets.campaign_faults(presets.facts_for(preset, PRESET_FACTS), rules)
