"""The sidecar's settings, and the one `Settings` object composed of every package's settings.

`Settings` holds the core's (`CoreSettings`), the adapter's (`KubernetesSettings`) and the
sidecar's own (`SidecarSettings`), each read from the same Spark-style property mapping (a real
`spark-defaults.conf` included). Keys none of them reads are judged by `properties.review`: other
Spark properties are accepted and listed once at INFO; an unknown key in a namespace the sidecar
owns is refused with the nearest known key, since a typo must not silently fall back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from execpods.core import CoreSettings, FeatureSettings, SettingsError
from execpods.core.settingkit import (
    FamilySpec,
    SettingsBase,
    SettingSpec,
    duration_setting,
    label_value,
    non_negative,
    parse_int,
    parse_str,
    positive,
    setting,
)
from execpods.k8s import ApiRateSettings, KubernetesSettings, app_id_prefix_problem
from execpods.sidecar.addresses import listen_address_problem
from execpods.sidecar.config.properties import (
    OTHER_SPARK_KEYS,
    PropertyReview,
    apply_aliases,
    review,
)
from execpods.sidecar.config.sparkkeys import CATALOGUED_NAMESPACES, KeyStatus, listed_status
from execpods.sidecar.guard.security import SecuritySettings, check_listener
from execpods.sidecar.telemetry.health import HealthSettings
from execpods.sidecar.telemetry.metrics import MetricsSettings

DEFAULT_PORT = 50551
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"


def _app_id_rule(value: str) -> str | None:
    if not value:
        return "must be set"  # the CLI adds the flag and variable that set it
    return label_value(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class SidecarSettings(SettingsBase):
    """What the gRPC server itself reads."""

    app_id: str = setting(
        "spark.app.id",
        "",
        "The application id: executor pods are labelled with it, and only they are touched.",
        parse=parse_str,
        rule=_app_id_rule,
        flag="--app-id",
        env="EXECPODS_APP_ID",
    )
    listen: str = setting(
        "execpods.sidecar.listen",
        DEFAULT_LISTEN,
        "Address of the gRPC server: host:port (port 0 = any free port) or unix:<path>.",
        parse=parse_str,
        rule=listen_address_problem,
        flag="--listen",
        env="EXECPODS_LISTEN",
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
    stream_send_budget_mib: int = setting(
        "execpods.sidecar.stream.sendBudget",
        2,
        "MiB of large stream messages (full snapshots) on their way out at once, across all "
        "streams; the others wait their turn, so memory does not grow with the number of "
        "streams (a full snapshot of 10,000 executors is about 1 MiB).",
        parse=parse_int,
        rule=positive,
    )
    stream_max_batch_interval: float = duration_setting(
        "execpods.sidecar.stream.maxBatchInterval",
        "60s",
        "Longest batch_interval_ms a stream may ask for (beyond it: INVALID_ARGUMENT), so no "
        "stream can be silenced for ever.",
    )
    stream_removal_window: int = setting(
        "execpods.sidecar.stream.removalWindow",
        10_000,
        "Removal decisions kept for streams that resume (StreamSnapshotsRequest.resume_from); "
        "a position older than the window re-syncs. Costs about 0.5 KB per removal kept (with "
        "a typical 220-character message), so about 5 MB at the default (measured by "
        "`python -m execpods.devtools.bench.sidecar`).",
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
    *FeatureSettings.slices(),
    KubernetesSettings,
    ApiRateSettings,
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


def _markdown(text: str) -> str:
    return text.replace("|", "&#124;").replace("<", "&lt;").replace(">", "&gt;")


def settings_table() -> str:
    """Every property as Markdown tables, one per settings class (docs/configuration.md)."""
    sections = []
    for cls in SETTINGS_CLASSES:
        doc = (cls.__doc__ or "").strip()
        if not doc or doc.startswith(f"{cls.__name__}("):  # the dataclass' generated signature
            raise TypeError(f"{cls.__name__} needs a docstring: its first line heads its table")
        title = doc.splitlines()[0]
        rows = [
            f"| `{spec.key}` | {f'`{spec.default_text}`' if spec.default_text else '-'} | "
            + " ".join(f"`{via}`" for via in (spec.flag, spec.env) if via)
            + f" | {_markdown(spec.doc)} |"
            for spec in cls.specs().values()
        ]
        rows += [
            f"| `{family.prefix}NAME` | - |  | {_markdown(family.doc)} |"
            for family in cls.families().values()
        ]
        sections.append(
            f"### `{cls.__name__}`: {title}\n\n"
            "| property | default | flag, variable | what it does |\n| --- | --- | --- | --- |\n"
            + "\n".join(rows)
        )
    return "\n\n".join(sections) + "\n"


def all_families() -> dict[str, FamilySpec]:
    """Every family of properties (`<prefix>NAME`) the sidecar reads, by prefix."""
    families: dict[str, FamilySpec] = {}
    for cls in SETTINGS_CLASSES:
        families.update(cls.families())
    return families


def flagged_specs() -> list[SettingSpec]:
    """The settings that have a dedicated command-line flag: the sidecar's own (the app id) first,
    then the adapter's and the core's, each in declaration order."""
    return [
        spec
        for cls in reversed(SETTINGS_CLASSES)
        for spec in cls.specs().values()
        if spec.flag is not None
    ]


def reads(key: str) -> bool:
    """Whether some settings class reads `key` (the adapter also reads `spark.executorEnv.*`)."""
    return any(cls.reads(key) for cls in SETTINGS_CLASSES)


def spark_key_status(key: str) -> tuple[KeyStatus, str] | None:
    """What the sidecar does with a Spark key (or a `...`-ending family of keys) and why; None
    when a catalogued key is neither honoured nor listed (the key-coverage test fails then)."""
    specs, families = all_specs(), all_families()
    if key in specs:
        return KeyStatus.HONOURED, specs[key].doc
    if key in families:
        return KeyStatus.HONOURED, families[key].doc
    if not key.endswith(".") and reads(key):
        return KeyStatus.HONOURED, "read as a member of a family of properties"
    listed = listed_status(key)
    if listed is not None:
        return listed
    if not key.startswith(CATALOGUED_NAMESPACES):
        return KeyStatus.NOT_APPLICABLE, OTHER_SPARK_KEYS
    return None


def spark_keys_table(spark_keys: Mapping[str, str]) -> str:
    """Every catalogued Spark key with what the sidecar does with it (docs/configuration.md)."""

    def shown_in_rows(key: str) -> bool:
        return key.startswith(CATALOGUED_NAMESPACES) or reads(key) or key in all_families()

    rows = []
    for key, default in sorted(spark_keys.items()):
        if not shown_in_rows(key):
            continue
        status = spark_key_status(key)
        shown = f"`{key}NAME`" if key.endswith(".") else f"`{key}`"
        spark_default = "-" if default in ("", "<undefined>") else f"`{_markdown(default)}`"
        what, why = ("**missing**", "") if status is None else (status[0].value, status[1])
        rows.append(f"| {shown} | {spark_default} | {what} | {_markdown(why)} |")
    others = sorted(
        key
        for key in spark_keys
        if not key.startswith(CATALOGUED_NAMESPACES)
        and not reads(key)
        and key not in all_families()
    )
    listing = ", ".join(f"`{key}NAME`" if key.endswith(".") else f"`{key}`" for key in others)
    return (
        "| Spark 4.3 key | Spark's default | here | what execpods does, or why not |\n"
        "| --- | --- | --- | --- |\n" + "\n".join(rows) + "\n\n"
        f"The other {len(others)} keys of Spark 4.3's core and Kubernetes modules are not "
        f"applicable ({_markdown(OTHER_SPARK_KEYS)}):\n\n<details><summary>the keys</summary>\n\n"
        + listing
        + "\n\n</details>\n"
    )


def review_properties(properties: Mapping[str, str]) -> PropertyReview:
    """What the sidecar makes of each key: read, accepted but unused, or refused."""
    return review(properties, reads=reads, known=all_specs())


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the sidecar runs with, read once and validated as a whole."""

    core: CoreSettings
    kubernetes: KubernetesSettings
    sidecar: SidecarSettings
    api_rate: ApiRateSettings = field(default_factory=ApiRateSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    features: FeatureSettings = field(default_factory=FeatureSettings)
    """Every allocation feature's own slice (bad nodes, claims, the registration timeout, the
    in-place resize...)."""

    def __post_init__(self) -> None:
        check_listener(self.sidecar.listen, self.security)
        app_id = self.sidecar.app_id
        problem = app_id_prefix_problem(app_id) if app_id else None
        if problem is not None and self.kubernetes.pod_name_prefix is None:
            raise SettingsError(
                f"spark.app.id={app_id!r} {problem}: set "
                "spark.kubernetes.executor.podNamePrefix to a prefix for the executor pods"
            )

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **sidecar: Any) -> Settings:
        """Parse and validate every property; refused keys are a `SettingsError` naming each with
        the nearest known key. Accepted keys the sidecar does not use are logged, once."""
        properties = apply_aliases(properties)
        judged = review_properties(properties)
        refusal = judged.refusal()
        if refusal is not None:
            raise SettingsError(refusal)
        judged.log()
        return cls(
            core=CoreSettings.from_properties(properties),
            kubernetes=KubernetesSettings.from_properties(properties),
            api_rate=ApiRateSettings.from_properties(properties),
            sidecar=SidecarSettings.from_properties(properties, **sidecar),
            security=SecuritySettings.from_properties(properties),
            health=HealthSettings.from_properties(properties),
            metrics=MetricsSettings.from_properties(properties),
            features=FeatureSettings.from_properties(properties),
        )
