"""The core's settings, keyed by Spark's property names.

`CoreSettings` is declared with the public settings kit (`execpods.core.settingkit`): every field
names its property, default, parser, rule and meaning through `setting(...)`, and validation runs
on construction. Other packages declare their own settings classes with the same kit; the sidecar
composes them into one object. The kit's names are re-exported here for older imports.
"""

from __future__ import annotations

from dataclasses import dataclass

from execpods.core.labels import ExecutorLabels
from execpods.core.settingkit import (
    SettingsBase,
    SettingSpec,
    any_value,
    duration_setting,
    label_key,
    label_value,
    non_negative,
    parse_bool,
    parse_duration,
    parse_int,
    parse_str,
    positive,
    setting,
    unknown_keys,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreSettings(SettingsBase):
    """What the store, the allocator, the lifecycle manager and the backend read."""

    initial_executors: int = setting(
        "spark.executor.instances",
        2,
        "Executors requested at start.",
        parse=parse_int,
        rule=non_negative,
        flag="--initial-executors",
        env="EXECPODS_INITIAL_EXECUTORS",
    )
    batch_size: int = setting(
        "spark.kubernetes.allocation.batch.size",
        5,
        "Most executor pods requested in one allocation round.",
        parse=parse_int,
        rule=positive,
    )
    batch_delay: float = duration_setting(
        "spark.kubernetes.allocation.batch.delay",
        "1s",
        "Interval between allocation rounds (the allocator's subscriber interval).",
    )
    api_polling_interval: float = duration_setting(
        "spark.kubernetes.executor.apiPollingInterval",
        "30s",
        "Interval between full lists of the executor pods (the poll source).",
    )
    event_processing_interval: float = duration_setting(
        "spark.kubernetes.executor.eventProcessingInterval",
        "1s",
        "Interval between lifecycle manager rounds.",
    )
    delete_on_termination: bool = setting(
        "spark.kubernetes.executor.deleteOnTermination",
        True,
        "Delete executor pods that terminated, and all executor pods when the backend stops.",
        parse=parse_bool,
    )
    enable_api_watcher: bool = setting(
        "spark.kubernetes.executor.enableApiWatcher",
        True,
        "Watch the executor pods (the low-latency source).",
        parse=parse_bool,
    )
    enable_api_polling: bool = setting(
        "spark.kubernetes.executor.enableApiPolling",
        True,
        "Poll the executor pods (the source that repairs missed events).",
        parse=parse_bool,
    )
    removed_executors_cache_ttl: float = duration_setting(
        "execpods.lifecycle.removedExecutorsCacheTtl",
        "3min",
        "How long the lifecycle manager remembers it told the driver about an executor.",
    )
    label_app_id: str = setting(
        "execpods.labels.appId",
        "spark-app-selector",
        "Label key holding the application id.",
        parse=parse_str,
        rule=label_key,
    )
    label_role: str = setting(
        "execpods.labels.role",
        "spark-role",
        "Label key holding the pod's role.",
        parse=parse_str,
        rule=label_key,
    )
    label_executor_role: str = setting(
        "execpods.labels.executorRole",
        "executor",
        "Role label value of executor pods.",
        parse=parse_str,
        rule=label_value,
    )
    label_executor_id: str = setting(
        "execpods.labels.executorId",
        "spark-exec-id",
        "Label key holding the executor id.",
        parse=parse_str,
        rule=label_key,
    )

    @property
    def pod_creation_timeout(self) -> float:
        """How long a requested executor may stay unseen before it is deleted and re-requested."""
        return max(5 * self.batch_delay, 60.0)

    @property
    def labels(self) -> ExecutorLabels:
        return ExecutorLabels(
            app_id=self.label_app_id,
            role=self.label_role,
            executor_role=self.label_executor_role,
            executor_id=self.label_executor_id,
        )


__all__ = [
    "CoreSettings",
    "SettingSpec",
    "SettingsBase",
    "any_value",
    "duration_setting",
    "label_key",
    "label_value",
    "non_negative",
    "parse_bool",
    "parse_duration",
    "parse_int",
    "parse_str",
    "positive",
    "setting",
    "unknown_keys",
]
