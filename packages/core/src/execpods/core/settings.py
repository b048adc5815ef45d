"""The core's settings, keyed by Spark's property names.

`CoreSettings` is declared with the public settings kit (`execpods.core.settingkit`): every field
names its property, default, parser, rule and meaning through `setting(...)`, and validation runs
on construction. Other packages declare their own settings classes with the same kit; the sidecar
composes them into one object. The kit's names are re-exported here for older imports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from execpods.core.errors import SettingsError
from execpods.core.failurerules import (
    FAILURE_RULES_DOC,
    FAILURE_RULES_PREFIX,
    check_rules,
    parse_rules,
    rule_number,
)
from execpods.core.labels import ExecutorLabels
from execpods.core.settingkit import (
    SettingsBase,
    SettingSpec,
    any_value,
    duration_setting,
    if_set,
    label_key,
    label_value,
    non_negative,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_optional_str,
    parse_str,
    positive,
    setting,
    setting_family,
    unknown_keys,
)

INT_MAX = 2**31 - 1
"""Spark's Int.MaxValue: the default of its unbounded integer caps."""


def above_100ms(value: float) -> str | None:
    """Spark refuses an allocation batch delay of 100 ms or less (SPARK-49447)."""
    return None if value > 0.1 else "must be greater than 0.1s (100ms)"


def _int32(value: int) -> str | None:
    """Spark's intConf, and what Kubernetes takes in pod-deletion-cost."""
    return None if -(2**31) <= value <= INT_MAX else "must be a 32-bit integer"


def _label_value_or_empty(value: str) -> str | None:
    """A label value, or empty (Spark's default decommission label value)."""
    return None if value == "" else label_value(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreSettings(SettingsBase):
    """What the store, the allocator, the lifecycle manager and the backend read."""

    executor_instances: int | None = setting(
        "spark.executor.instances",
        None,
        "Executors requested at start; unset: 2, or under dynamic allocation Spark's initial "
        "target, max(minExecutors, initialExecutors, this).",
        parse=parse_int,
        rule=if_set(non_negative),
        flag="--initial-executors",
        env="EXECPODS_INITIAL_EXECUTORS",
    )
    batch_size: int = setting(
        "spark.kubernetes.allocation.batch.size",
        20,
        "Executor pods requested per profile in one allocation round (the first step of an "
        "adaptive round).",
        parse=parse_int,
        rule=positive,
    )
    batch_delay: float = duration_setting(
        "spark.kubernetes.allocation.batch.delay",
        "1s",
        "Interval between allocation rounds (the allocator's subscriber interval).",
        rule=above_100ms,
    )
    executor_timeout: float = duration_setting(
        "spark.kubernetes.allocation.executor.timeout",
        "600s",
        "How long a requested executor may stay unseen in any snapshot before it is deleted and "
        "requested again (the effective value is max(5 x batch.delay, this)).",
    )
    max_pending_pods: int = setting(
        "spark.kubernetes.allocation.maxPendingPods",
        INT_MAX,
        "Most executors not yet running (pending or requested-but-unseen) over all profiles.",
        parse=parse_int,
        rule=positive,
    )
    max_pending_pods_per_rp_setting: int | None = setting(
        "spark.kubernetes.allocation.maxPendingPodsPerRp",
        None,
        "Most executors not yet running per resource profile; unset, maxPendingPods (must not "
        "exceed it).",
        parse=parse_int,
        rule=if_set(positive),
    )
    allocation_maximum: int = setting(
        "spark.kubernetes.allocation.maximum",
        INT_MAX,
        "Cap on the executor pods the allocator creates: as Spark's id counter, at most this "
        "minus 1 since it started (a restart counts afresh), then allocation stops (reported on "
        "the stream). Ids are never reused, so after a restart they may exceed it.",
        parse=parse_int,
        rule=positive,
    )
    batch_concurrency: int = setting(
        "execpods.allocation.batch.concurrency",
        16,
        "Most pod creates in flight at once within one allocation round.",
        parse=parse_int,
        rule=positive,
    )
    executor_idle_timeout: float = duration_setting(
        "spark.dynamicAllocation.executorIdleTimeout",
        "60s",
        "Scale-down spares executor requests and Pending pods younger than this (a bare number "
        "is seconds, as in Spark).",
        rule=non_negative,
        unit="s",
    )
    adaptive_batches: bool = setting(
        "execpods.allocation.adaptiveBatches",
        True,
        "Grow a round's batch by doubling while creates and starts go cleanly (slow start); "
        "shrink it on refusals, throttling or start failures. Off: batch.size per round, as Spark.",
        parse=parse_bool,
    )
    wait_for_pending_pods: bool = setting(
        "execpods.allocation.waitForPendingPods",
        False,
        "The 2018 rule (SPARK-24248): no new batch while any executor is pending. Newest Spark "
        "dropped it (SPARK-33262); kept as an explicit policy.",
        parse=parse_bool,
    )
    id_block: int = setting(
        "execpods.allocation.idBlock",
        2000,
        "Executor ids reserved at once in the id ledger before any of them is used (a round "
        "that needs more reserves what it needs): a scale-up to 10,000 costs five writes; a "
        "restart skips at most this many unused ids.",
        parse=parse_int,
        rule=positive,
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
    max_total: int = setting(
        "execpods.allocation.maxTotal",
        10_000,
        "Most executors a driver may ask for, per resource profile (RequestTotal beyond it is "
        "INVALID_ARGUMENT): a bound on what one bad request can make the allocator create. "
        "(spark.kubernetes.allocation.maximum, Spark's cap on the pods one allocator life "
        "creates, is separate: beyond it allocation stops, as in Spark.)",
        parse=parse_int,
        rule=positive,
    )
    delete_grace: float = duration_setting(
        "execpods.shutdown.deleteGrace",
        "20s",
        "How long stopping retries deleting the executor pods while the API fails; keep it "
        "below the pod's terminationGracePeriodSeconds (30 s by default) minus "
        "execpods.sidecar.shutdownGrace. 0 makes one attempt.",
        rule=non_negative,
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

    # Lifecycle (issue 10): pod states, removals, failures, graceful kill, snapshot sources.
    executor_container_name: str = setting(
        "spark.kubernetes.executor.podTemplateContainerName",
        "spark-kubernetes-executor",
        "The executor's container: its exit code is the executor's (SPARK-49804).",
        parse=parse_str,
        rule=label_value,
    )
    check_all_containers: bool = setting(
        "spark.kubernetes.executor.checkAllContainers",
        True,
        "With restartPolicy Never, a Running pod any of whose containers exited non-zero failed.",
        parse=parse_bool,
    )
    missing_pod_detect_delta: float = duration_setting(
        "spark.kubernetes.executor.missingPodDetectDelta",
        "30s",
        "An executor the driver registered is reported missing only when a full list taken more "
        "than this after its registration lacks its pod (SPARK-33711).",
    )
    deleted_executors_cache_timeout: float = duration_setting(
        "spark.kubernetes.executor.deletedExecutorsCacheTimeout",
        "3min",
        "Spark's window for not reporting a removed executor twice. execpods remembers every "
        "removal for the backend's life instead (runs of ids: a few bytes an executor at "
        "most), so a lingering pod is never reported or counted again; accepted and unused. "
        "A bare number is seconds, as in Spark.",
        rule=non_negative,
        unit="s",
    )
    max_num_failures: int | None = setting(
        "spark.executor.maxNumFailures",
        None,
        "Executor failures (creation failures included) after which the application fails; "
        "unset: max(2 x executors, 3), executors being spark.dynamicAllocation.maxExecutors "
        "with dynamic allocation, else spark.executor.instances.",
        parse=parse_int,
        rule=if_set(positive),
    )
    failures_validity_interval: float | None = setting(
        "spark.executor.failuresValidityInterval",
        None,
        "Failures older than this no longer count towards spark.executor.maxNumFailures; unset: "
        "they always count.",
        parse=parse_duration,
        rule=if_set(positive),
    )
    count_disruptions: bool = setting(
        "execpods.executor.countDisruptions",
        False,
        "Count executors Kubernetes disrupted (evicted, preempted, removed from a tainted or "
        "lost node: a DisruptionTarget condition, or status.reason Evicted) toward "
        "spark.executor.maxNumFailures, as Spark does. Off: they are reported with their cause "
        "and not counted, as the Job controller's podFailurePolicy ignores disruptions.",
        parse=parse_bool,
    )
    failure_rules: Mapping[str, str] = setting_family(
        FAILURE_RULES_PREFIX, FAILURE_RULES_DOC, name_rule=rule_number
    )
    dynamic_allocation_enabled: bool = setting(
        "spark.dynamicAllocation.enabled",
        False,
        "Whether the driver scales executors itself: the initial target then follows Spark's "
        "dynamic-allocation rule, and the failure limit's default counts maxExecutors.",
        parse=parse_bool,
    )
    dynamic_allocation_max_executors: int = setting(
        "spark.dynamicAllocation.maxExecutors",
        2**31 - 1,
        "Most executors under dynamic allocation: the initial target's ceiling and the failure "
        "limit's default.",
        parse=parse_int,
        rule=non_negative,
    )
    delete_grace_period: float = duration_setting(
        "spark.kubernetes.dynamicAllocation.deleteGracePeriod",
        "5s",
        "After KillExecutors deleted pods with their own grace period, those still Running and "
        "not being deleted this much later are deleted again, plainly (as Spark: never forced).",
        rule=non_negative,
    )
    enable_polling_with_resource_version: bool = setting(
        "spark.kubernetes.executor.enablePollingWithResourceVersion",
        False,
        "Poll with resourceVersion=0: the API server answers from its cache, not from etcd; a "
        "list older than the last one applied is ignored.",
        parse=parse_bool,
    )

    # Spark 4.3's newest executor-pod behaviours (issue 21): dynamic-allocation floors,
    # graceful decommission on kills, OOM recovery mode.
    dynamic_allocation_min_executors: int = setting(
        "spark.dynamicAllocation.minExecutors",
        0,
        "Under dynamic allocation, the least executors: a floor of the initial target.",
        parse=parse_int,
        rule=non_negative,
    )
    dynamic_allocation_initial_executors: int | None = setting(
        "spark.dynamicAllocation.initialExecutors",
        None,
        "Under dynamic allocation, executors requested at start (the initial target is "
        "max(minExecutors, this, spark.executor.instances), as Spark); unset: minExecutors.",
        parse=parse_int,
        rule=if_set(non_negative),
    )
    decommission_label: str | None = setting(
        "spark.kubernetes.executor.decommissionLabel",
        None,
        "Label set on the pods of executors the driver kills (KillExecutors), before they are "
        "deleted: for pod disruption budgets and other tooling that must see them leave.",
        parse=parse_optional_str,
        rule=if_set(label_key),
    )
    decommission_label_value: str = setting(
        "spark.kubernetes.executor.decommissionLabelValue",
        "",
        "Value of spark.kubernetes.executor.decommissionLabel (Spark's default: empty).",
        parse=parse_str,
        rule=_label_value_or_empty,
    )
    pod_deletion_cost: int | None = setting(
        "spark.kubernetes.executor.podDeletionCost",
        None,
        "Read and validated as Spark does; Spark sets it as controller.kubernetes.io/"
        "pod-deletion-cost only under its deployment allocator (a ReplicaSet chooses victims by "
        "it): execpods makes no Deployment, so it never sets it.",
        parse=parse_int,
        rule=if_set(_int32),
    )
    recovery_mode_enabled: bool | None = setting(
        "spark.kubernetes.allocation.recoveryMode.enabled",
        None,
        "OOM recovery mode (Spark 4.2+): unset, it switches on when an executor is lost to OOM; "
        "true, on from the start; false, never. Executors created while it is on announce "
        "max(1, ceil(spark.task.cpus)) cores (SPARK_EXECUTOR_CORES), so each runs one task.",
        parse=parse_bool,
    )
    task_cpus: float = setting(
        "spark.task.cpus",
        1.0,
        "Cores each task takes: the cores a recovery-mode executor announces are "
        "max(1, ceil(this)).",
        parse=parse_float,
        rule=positive,
        default_text="1",
    )

    @property
    def max_executor_failures(self) -> int:
        """`spark.executor.maxNumFailures`, or Spark's default for it."""
        if self.max_num_failures is not None:
            return self.max_num_failures
        executors = (
            self.dynamic_allocation_max_executors
            if self.dynamic_allocation_enabled
            else self.executor_instances or 0
        )
        return max(3, min(2 * executors, 2**31 - 1))

    def __post_init__(self) -> None:
        SettingsBase.__post_init__(self)
        # A rule that cannot be read, or could never apply, fails here, by its property.
        check_rules(parse_rules(self.failure_rules), count_disruptions=self.count_disruptions)
        self._check_dynamic_allocation()
        if self.max_pending_pods_per_rp > self.max_pending_pods:
            raise SettingsError(
                "spark.kubernetes.allocation.maxPendingPodsPerRp="
                f"{self.max_pending_pods_per_rp} is invalid: it must not exceed "
                f"spark.kubernetes.allocation.maxPendingPods={self.max_pending_pods}"
            )

    def _check_dynamic_allocation(self) -> None:
        """Spark's own check: the initial target lies between minExecutors and maxExecutors."""
        if not self.dynamic_allocation_enabled:
            return
        low, high = self.dynamic_allocation_min_executors, self.dynamic_allocation_max_executors
        initial = self.initial_executors
        if not low <= initial <= high:
            raise SettingsError(
                f"spark.dynamicAllocation: the initial executor number {initial} must be between "
                f"spark.dynamicAllocation.minExecutors={low} and "
                f"spark.dynamicAllocation.maxExecutors={high}"
            )

    @property
    def initial_executors(self) -> int:
        """The initial target, as Spark's `SchedulerBackendUtils.getInitialTargetExecutorNumber`:
        under dynamic allocation max(minExecutors, initialExecutors, spark.executor.instances),
        else spark.executor.instances (2 when unset)."""
        if not self.dynamic_allocation_enabled:
            return 2 if self.executor_instances is None else self.executor_instances
        initial = self.dynamic_allocation_initial_executors
        return max(
            self.dynamic_allocation_min_executors,
            self.dynamic_allocation_min_executors if initial is None else initial,
            self.executor_instances or 0,
        )

    @property
    def recovery_cores(self) -> int:
        """The cores a recovery-mode executor announces: max(1, ceil(spark.task.cpus))."""
        return max(1, math.ceil(self.task_cpus))

    @property
    def max_pending_pods_per_rp(self) -> int:
        """maxPendingPodsPerRp, falling back to maxPendingPods as in Spark."""
        per_rp = self.max_pending_pods_per_rp_setting
        return self.max_pending_pods if per_rp is None else per_rp

    @property
    def pod_creation_timeout(self) -> float:
        """How long a requested executor may stay unseen before it is deleted and re-requested.

        As Spark: max(5 x batch.delay, allocation.executor.timeout).
        """
        return max(5 * self.batch_delay, self.executor_timeout)

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
