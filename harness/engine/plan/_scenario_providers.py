"""A scenario's provider tables, one ``[provider]`` or several ``[provider.NAME]``, made specs.

Both shapes end as the same list of ``ProviderSpec`` (the first one the campaign's own
provider fields, the rest its other providers), so nothing after loading asks which shape
the file used; only the credentials mode is one for all of them, since every provider grants
the same worker its credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fake_providers import FaultRule
from harness.engine.plan._providers import ProviderSpec
from harness.engine.plan._scenario_schema import named_providers, presets
from harness.engine.plan._scenario_toml import ScenarioFile
from harness.engine.plan.credentials import CREDENTIAL_MODES

#: presets without a dedupe key, so without a window to set
_KEYLESS = ("chat", "smtp")


@dataclass(frozen=True)
class ScenarioProviders:
    """The providers a scenario runs, in the file's order, and the credentials they grant."""

    specs: tuple[ProviderSpec, ...]
    #: whether the file names them (``[provider.NAME]``) rather than giving one ``[provider]``
    named: bool
    credentials: str


def read_providers(source: ScenarioFile) -> ScenarioProviders:
    """Every provider table of the file, checked, with their one credentials mode."""
    provider_table = source.tables.get("provider", {})
    named = named_providers(provider_table)
    tables: list[tuple[str, str | None, dict[str, Any]]] = (
        [(f"provider.{n}", n, t) for n, t in provider_table.items()]
        if named
        else [("provider", None, provider_table)]
    )
    specs = [_provider_spec(source, where, name, table) for where, name, table in tables]
    return ScenarioProviders(tuple(specs), named, _credentials(source, tables))


def _credentials(source: ScenarioFile, tables: list[tuple[str, str | None, dict[str, Any]]]) -> str:
    """The one ``credentials`` value the provider tables give (``shared`` if none does)."""
    given = {t["credentials"] for _, _, t in tables if "credentials" in t}
    if len(given) > 1:
        raise source.error(
            tables[-1][0],
            "credentials",
            "every provider grants the same credentials; give one value (or set it once)",
        )
    credentials: str = given.pop() if given else "shared"
    if credentials not in CREDENTIAL_MODES:
        where = next(w for w, _, t in tables if "credentials" in t)
        raise source.error(
            where,
            "credentials",
            f"expected one of {', '.join(CREDENTIAL_MODES)}, got {credentials!r}",
        )
    return credentials


def _provider_spec(
    source: ScenarioFile, where: str, name: str | None, provider: dict[str, Any]
) -> ProviderSpec:
    """One provider table (``[provider]`` or ``[provider.NAME]``), checked."""
    preset = provider.get("preset", "payments")
    known = presets()
    if preset not in known:
        raise source.error(
            where,
            "preset",
            f"unknown preset {preset!r}; expected one of {', '.join(known)}",
        )
    if preset in _KEYLESS and "window_s" in provider:
        raise source.error(where, "window_s", f"preset {preset!r} has no key, so no window")
    options = dict(provider.get("options", {}))
    if options:
        from fake_providers._presets import get_preset

        try:
            get_preset(preset).resolve(options)
        except Exception as exc:
            raise source.error(where, "options", str(exc)) from None
    return ProviderSpec(
        name=name or preset,
        preset=preset,
        window_s=float(provider["window_s"]) if "window_s" in provider else None,
        options=options,
        faults=_faults(source, where, provider),
    )


def _faults(
    source: ScenarioFile, where: str, provider: dict[str, Any]
) -> tuple[dict[str, Any], ...] | None:
    """A provider table's ``faults``, each rule one the fake provider accepts."""
    if "faults" not in provider:
        return None
    checked = []
    for i, rule in enumerate(provider["faults"]):
        if not isinstance(rule, dict):
            raise source.error(where, "faults", f"entry {i + 1}: expected a table")
        try:
            FaultRule(**rule)
        except Exception as exc:
            raise source.error(where, "faults", f"entry {i + 1}: {exc}") from None
        checked.append(dict(rule))
    return tuple(checked)
