"""The sidecar's settings, and the one `Settings` object composed of every package's settings.

`Settings` holds the core's (`CoreSettings`), the adapter's (`KubernetesSettings`) and the
sidecar's own (`SidecarSettings`), each read from the same Spark-style property mapping. A key that
none of them reads is refused (a typo must not silently fall back to a default), except the
`spark.executorEnv.NAME` family, which the adapter passes into the executors' environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from execpods.core import CoreSettings, SettingsBase, SettingsError, unknown_keys
from execpods.core.settings import (
    SettingSpec,
    duration_setting,
    label_value,
    non_negative,
    parse_int,
    parse_str,
    positive,
    setting,
)
from execpods.k8s import KubernetesSettings, is_known_key
from execpods.sidecar.health import HealthSettings
from execpods.sidecar.metrics import MetricsSettings
from execpods.sidecar.security import SecuritySettings

DEFAULT_PORT = 50551
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\s]+):(?P<port>\d{1,5})$")


def _app_id_rule(value: str) -> str | None:
    if not value:
        return "must be set (--app-id, EXECPODS_APP_ID or --conf spark.app.id=...)"
    return label_value(value)


def listen_address_problem(value: str) -> str | None:
    """Why `value` is not a listen address (host:port or unix:<path>), or None when it is."""
    if value.startswith("unix:"):
        return None if len(value) > len("unix:") else "needs a path after unix:"
    match = _HOST_PORT.match(value)
    if match is None:
        return "must be host:port (e.g. 127.0.0.1:0 for any free port) or unix:<path>"
    if int(match.group("port")) > 65535:
        return "has a port above 65535"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class SidecarSettings(SettingsBase):
    """What the gRPC server itself reads."""

    app_id: str = setting(
        "spark.app.id",
        "",
        "The application id: executor pods are labelled with it, and only they are touched.",
        parse=parse_str,
        rule=_app_id_rule,
    )
    listen: str = setting(
        "execpods.sidecar.listen",
        DEFAULT_LISTEN,
        "Address of the gRPC server: host:port (port 0 = any free port) or unix:<path>.",
        parse=parse_str,
        rule=listen_address_problem,
    )
    shutdown_grace: float = duration_setting(
        "execpods.sidecar.shutdownGrace",
        "5s",
        "How long calls in flight may take to finish when the server stops.",
    )
    stream_max_pending: int = setting(
        "execpods.sidecar.stream.maxPendingSnapshots",
        10_000,
        "Snapshots a slow stream may fall behind by; beyond it the oldest are dropped and the "
        "stream catches up with a full snapshot.",
        parse=parse_int,
        rule=positive,
    )
    max_concurrent_rpcs: int = setting(
        "execpods.sidecar.maxConcurrentRpcs",
        0,
        "Most concurrent RPCs, streams included, the server accepts (0 = no limit).",
        parse=parse_int,
        rule=non_negative,
    )


SETTINGS_CLASSES: tuple[type[SettingsBase], ...] = (
    CoreSettings,
    KubernetesSettings,
    SidecarSettings,
    SecuritySettings,
    HealthSettings,
    MetricsSettings,
)


def all_specs() -> dict[str, SettingSpec]:
    """Every property the sidecar reads, by key (for help output and the docs)."""
    specs: dict[str, SettingSpec] = {}
    for cls in SETTINGS_CLASSES:
        specs.update(cls.specs())
    return specs


def refused_keys(properties: Mapping[str, str]) -> list[str]:
    """Keys no settings class reads.

    The adapter's `is_known_key` judges its own keys, since it also reads the open-ended
    `spark.executorEnv.NAME` family that no list of specs can name.
    """
    rest = {k: v for k, v in properties.items() if not is_known_key(k)}
    return unknown_keys(rest, *(cls for cls in SETTINGS_CLASSES if cls is not KubernetesSettings))


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the sidecar runs with, read once and validated as a whole."""

    core: CoreSettings
    kubernetes: KubernetesSettings
    sidecar: SidecarSettings
    security: SecuritySettings = field(default_factory=SecuritySettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **sidecar: Any) -> Settings:
        """Parse and validate every property; unknown keys are a `SettingsError` naming them."""
        unknown = refused_keys(properties)
        if unknown:
            raise SettingsError(
                f"unknown setting{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
                "(see `execpods-sidecar settings` for the known ones)"
            )
        return cls(
            core=CoreSettings.from_properties(properties),
            kubernetes=KubernetesSettings.from_properties(properties),
            sidecar=SidecarSettings.from_properties(properties, **sidecar),
            security=SecuritySettings.from_properties(properties),
            health=HealthSettings.from_properties(properties),
            metrics=MetricsSettings.from_properties(properties),
        )
