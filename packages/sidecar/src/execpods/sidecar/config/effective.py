"""`execpods-sidecar settings --effective`: every value in force and where it came from.

As `spark-submit --verbose` does for Spark, it prints each property the sidecar reads with its
effective value and its source (the properties file and line, the environment variable, `--conf`,
the flag, or the default), then every other key given, with what the sidecar makes of it
(not implemented, not applicable, ignored), so a platform team can check a real
`spark-defaults.conf` before deploying it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from execpods.core.settingkit import SettingsBase
from execpods.sidecar.config.properties import apply_aliases
from execpods.sidecar.config.settings import Settings, review_properties
from execpods.sidecar.config.sparkkeys import DEPRECATED_ALIASES

PLACEHOLDER_APP_ID = "unset-app-id"
"""Stands in for a missing spark.app.id, so the rest can still be shown (serve requires one)."""


def _instances(settings: Settings) -> dict[type[SettingsBase], SettingsBase]:
    parts: list[SettingsBase] = [
        settings.core,
        settings.kubernetes,
        settings.api_rate,
        settings.sidecar,
        settings.security,
        settings.health,
        settings.metrics,
        *settings.features.values(),
    ]
    return {type(part): part for part in parts}


def effective_lines(sourced: Mapping[str, tuple[str, str]]) -> list[str]:
    """The lines `--effective` prints; raises `SettingsError` as `serve` would."""
    values = {key: value for key, (value, _) in sourced.items()}
    origins = {key: origin for key, (_, origin) in sourced.items()}
    renamed = apply_aliases(values, logging.getLogger("execpods.sidecar.config.effective"))
    for old, new in (
        (o, n) for o, n in DEPRECATED_ALIASES.items() if o in values and n not in values
    ):
        origins[new] = f"{origins[old]} (as {old}, deprecated)"
    overrides = {} if renamed.get("spark.app.id") else {"app_id": PLACEHOLDER_APP_ID}
    settings = Settings.from_properties(renamed, **overrides)
    lines = ["Effective settings (value  [source]):"]
    for cls, instance in _instances(settings).items():
        rendered = instance.to_properties()
        for key in cls.specs():
            value = rendered.get(key)
            if key == "spark.app.id" and overrides:
                shown = "(unset: serve requires it)"
            else:
                shown = "(unset)" if value is None else value
            lines.append(f"  {key} = {shown}  [{origins.get(key, 'default')}]")
        for prefix in cls.families():
            members = sorted(k for k in rendered if k.startswith(prefix))
            lines.extend(f"  {k} = {rendered[k]}  [{origins.get(k, '?')}]" for k in members)
    lines.append(f"  (initial target: {settings.core.initial_executors} executors)")
    judged = review_properties(renamed)
    for title, entries in (
        ("Not implemented (accepted, ignored)", judged.not_implemented),
        ("Not applicable to the sidecar (accepted, ignored)", judged.not_applicable),
    ):
        if entries:
            lines.append(f"{title}:")
            lines.extend(f"  {k}  [{origins.get(k, '?')}]: {why}" for k, why in entries)
    if judged.not_spark:
        lines.append("Not Spark properties (ignored):")
        lines.extend(f"  {k}  [{origins.get(k, '?')}]" for k in judged.not_spark)
    return lines


def print_effective(sourced: Mapping[str, tuple[str, str]]) -> None:
    print("\n".join(effective_lines(sourced)))


__all__ = ["effective_lines", "print_effective"]
