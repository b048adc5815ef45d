"""Every Spark 4.3 property that bears on executor pods, and what the sidecar does with it.

A key a settings class reads is *honoured* (its spec says how); every other Spark 4.3 key of the
namespaces below is listed here, once, as *not applicable* (it configures something a sidecar
does not do: the driver's pod, spark-submit, the executor's JVM) or *not implemented* (it
changes executor pods in Spark, and execpods does not do that yet), each with why.
`tests/sidecar/test_spark_keys.py` reads the key names from the installed Spark 4.3 jars and fails
when one of these namespaces holds a key that is neither honoured nor listed, or when a listed key
is not Spark's, or is honoured too.

Keys of other namespaces (`spark.sql.*`, `spark.driver.*`, ...) are not applicable as a rule: they
configure the engine, the driver or the executor process, never which executor pods exist.

The volumes work (issue 22: PVCs, resizing, bad nodes, registration timeouts) flips its keys from
not implemented to honoured by declaring their `setting(...)`: a key a settings class reads is
honoured whatever is listed here, and the test then asks for its line in `VOLUMES_PENDING` to go.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

SPARK_VERSION = "4.3.0"

CATALOGUED_NAMESPACES = (
    "spark.kubernetes.",
    "spark.executor.",
    "spark.dynamicAllocation.",
    "spark.decommission.",
)
"""Where every Spark key is honoured or listed here (the key-coverage test checks them all)."""


class KeyStatus(enum.Enum):
    HONOURED = "honoured"
    NOT_APPLICABLE = "not applicable"
    NOT_IMPLEMENTED = "not implemented"


_DRIVER_POD = "configures the driver's pod or its Service; the sidecar makes only executor pods"
_SUBMIT = "read by spark-submit or the driver's own Kubernetes client, not by a sidecar"
_EXECUTOR_JVM = "read by the executor process itself, not by whoever makes its pod"
_DRIVER_DA = (
    "the driver's ExecutorAllocationManager decides targets with it; the sidecar gets the "
    "resulting totals over RequestTotal"
)
_ROLLING = (
    "executor rolling is Spark's driver plugin choosing executors by their task metrics; a driver "
    "rolls executors through KillExecutors"
)
_CONFIG_MAP = (
    "the sidecar creates no executor ConfigMap: the driver or the pod template supplies it"
)
_RESIZE = (
    "claim resize is Spark's ExecutorPVCResizePlugin, which acts on disk use the executors report "
    "to the driver (never seen by a sidecar) and refuses to start unless Spark's own allocator is "
    "in use; see 'Not implemented: resizing claims' in docs/configuration.md"
)

NOT_APPLICABLE: Mapping[str, str] = MappingProxyType(
    {
        "spark.kubernetes.allocation.pods.allocator": (
            "chooses the driver's allocator class; with the execpods plugin the sidecar is the "
            "allocator"
        ),
        "spark.kubernetes.appKillPodDeletionGracePeriod": _SUBMIT,
        "spark.kubernetes.configMap.maxSize": _CONFIG_MAP,
        "spark.kubernetes.driver.annotateExitException": _DRIVER_POD,
        "spark.kubernetes.driver.annotation.": _DRIVER_POD,
        "spark.kubernetes.driver.connectionTimeout": _SUBMIT,
        "spark.kubernetes.driver.container.image": _DRIVER_POD,
        "spark.kubernetes.driver.label.": _DRIVER_POD,
        "spark.kubernetes.driver.limit.cores": _DRIVER_POD,
        "spark.kubernetes.driver.master": _SUBMIT,
        "spark.kubernetes.driver.node.selector.": _DRIVER_POD,
        "spark.kubernetes.driver.pod.excludedFeatureSteps": _DRIVER_POD,
        "spark.kubernetes.driver.pod.featureSteps": _DRIVER_POD,
        "spark.kubernetes.driver.podTemplateContainerName": _DRIVER_POD,
        "spark.kubernetes.driver.podTemplateFile": _DRIVER_POD,
        "spark.kubernetes.driver.request.cores": _DRIVER_POD,
        "spark.kubernetes.driver.requestTimeout": _SUBMIT,
        "spark.kubernetes.driver.resourceNamePrefix": _DRIVER_POD,
        "spark.kubernetes.driver.scheduler.name": _DRIVER_POD,
        "spark.kubernetes.driver.secretKeyRef.": _DRIVER_POD,
        "spark.kubernetes.driver.secrets.": _DRIVER_POD,
        "spark.kubernetes.driver.securityContext.allowPrivilegeEscalation": _DRIVER_POD,
        "spark.kubernetes.driver.service.annotation.": _DRIVER_POD,
        "spark.kubernetes.driver.service.deleteOnTermination": _DRIVER_POD,
        "spark.kubernetes.driver.service.ipFamilies": _DRIVER_POD,
        "spark.kubernetes.driver.service.ipFamilyPolicy": _DRIVER_POD,
        "spark.kubernetes.driver.service.label.": _DRIVER_POD,
        "spark.kubernetes.driver.volumes.": _DRIVER_POD,
        "spark.kubernetes.driverEnv.": _DRIVER_POD,
        "spark.kubernetes.executor.disableConfigMap": _CONFIG_MAP,
        "spark.kubernetes.executor.minTasksPerExecutorBeforeRolling": _ROLLING,
        "spark.kubernetes.executor.pod.excludedFeatureSteps": (
            "names Scala feature-step classes run inside Spark's driver; the pod template and the "
            "executor properties shape the sidecar's pods"
        ),
        "spark.kubernetes.executor.pod.featureSteps": (
            "names Scala feature-step classes run inside Spark's driver; the pod template and the "
            "executor properties shape the sidecar's pods"
        ),
        "spark.kubernetes.executor.rollInterval": _ROLLING,
        "spark.kubernetes.executor.rollPolicy": _ROLLING,
        "spark.kubernetes.executor.useDriverPodIP": (
            "how executors address the driver is part of the environment the driver gives them "
            "(spark.executorEnv.*, the pod template)"
        ),
        "spark.kubernetes.file.upload.path": _SUBMIT,
        "spark.kubernetes.jars.avoidDownloadSchemes": _SUBMIT,
        "spark.kubernetes.report.interval": _SUBMIT,
        "spark.kubernetes.resource.type": _SUBMIT,
        "spark.kubernetes.submission.connectionTimeout": _SUBMIT,
        "spark.kubernetes.submission.requestTimeout": _SUBMIT,
        "spark.kubernetes.submission.waitAppCompletion": _SUBMIT,
        "spark.kubernetes.submitInDriver": _SUBMIT,
        "spark.kubernetes.trust.certificates": (
            "the sidecar's API client trusts what its kubeconfig or service account says"
        ),
        "spark.executor.allowSparkContext": _EXECUTOR_JVM,
        "spark.executor.decommission.forceKillTimeout": _EXECUTOR_JVM,
        "spark.executor.decommission.killInterval": _EXECUTOR_JVM,
        "spark.executor.decommission.signal": _EXECUTOR_JVM,
        "spark.executor.defaultExtraClassPath": _EXECUTOR_JVM,
        "spark.executor.heartbeat.dropZeroAccumulatorUpdates": _EXECUTOR_JVM,
        "spark.executor.heartbeat.maxFailures": _EXECUTOR_JVM,
        "spark.executor.heartbeatInterval": _EXECUTOR_JVM,
        "spark.executor.id": _EXECUTOR_JVM,
        "spark.executor.isolatedSessionCache.size": _EXECUTOR_JVM,
        "spark.executor.killOnFatalError.depth": _EXECUTOR_JVM,
        "spark.executor.limitActiveProcessorCount.enabled": _EXECUTOR_JVM,
        "spark.executor.logs.redirectConsoleOutputs": _EXECUTOR_JVM,
        "spark.executor.logs.rolling.enableCompression": _EXECUTOR_JVM,
        "spark.executor.logs.rolling.maxRetainedFiles": _EXECUTOR_JVM,
        "spark.executor.logs.rolling.maxSize": _EXECUTOR_JVM,
        "spark.executor.logs.rolling.strategy": _EXECUTOR_JVM,
        "spark.executor.logs.rolling.time.interval": _EXECUTOR_JVM,
        "spark.executor.metrics.fileSystemSchemes": _EXECUTOR_JVM,
        "spark.executor.metrics.pollingInterval": _EXECUTOR_JVM,
        "spark.executor.processTreeMetrics.enabled": _EXECUTOR_JVM,
        "spark.executor.syncLogLevel.enabled": _EXECUTOR_JVM,
        "spark.executor.userClassPathFirst": _EXECUTOR_JVM,
        "spark.dynamicAllocation.cachedExecutorIdleTimeout": _DRIVER_DA,
        "spark.dynamicAllocation.executorAllocationRatio": _DRIVER_DA,
        "spark.dynamicAllocation.schedulerBacklogTimeout": _DRIVER_DA,
        "spark.dynamicAllocation.shuffleTracking.enabled": _DRIVER_DA,
        "spark.dynamicAllocation.shuffleTracking.timeout": _DRIVER_DA,
        "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout": _DRIVER_DA,
        "spark.dynamicAllocation.testing": "Spark's own test switch",
    }
)
"""Spark 4.3 keys (and `...`-ending key families) a sidecar has no use for: key -> why."""

VOLUMES_PENDING: Mapping[str, str] = MappingProxyType(
    {
        "spark.kubernetes.executor.pvc.resizeFactor": _RESIZE,
        "spark.kubernetes.executor.pvc.resizeInterval": _RESIZE,
        "spark.kubernetes.executor.pvc.resizeThreshold": _RESIZE,
    }
)
"""Spark's claim-resize keys (4.2+): accepted and listed as not implemented (the memory resize keys
are honoured: `execpods.core.resize.ResizeSettings`)."""

NOT_IMPLEMENTED: Mapping[str, str] = MappingProxyType(
    {
        **VOLUMES_PENDING,
        "spark.kubernetes.executorSnapshotsSubscribersShutdownGracePeriod": (
            "the sidecar stops its subscribers at once; its own shutdown is "
            "execpods.sidecar.shutdownGrace"
        ),
        "spark.kubernetes.hadoop.configMapName": (
            "Spark mounts this Hadoop configuration ConfigMap into executor pods; mount it "
            "through the pod template or spark.kubernetes.executor.volumes.*"
        ),
        "spark.kubernetes.kerberos.krb5.configMapName": (
            "Spark mounts this krb5.conf ConfigMap into executor pods; mount it through the pod "
            "template"
        ),
        "spark.kubernetes.kerberos.krb5.path": (
            "Spark ships this krb5.conf to executor pods in a ConfigMap; use the pod template"
        ),
        "spark.kubernetes.kerberos.tokenSecret.itemKey": (
            "Spark mounts delegation tokens into executor pods; use spark.kubernetes.executor."
            "secrets.* or the pod template"
        ),
        "spark.kubernetes.kerberos.tokenSecret.name": (
            "Spark mounts delegation tokens into executor pods; use spark.kubernetes.executor."
            "secrets.* or the pod template"
        ),
        "spark.kubernetes.local.dirs.tmpfs": (
            "Spark backs executors' local directories with memory-medium emptyDirs; use "
            "spark.kubernetes.executor.volumes.emptyDir.* with options.medium=Memory"
        ),
        "spark.executor.extraClassPath": (
            "Spark passes it to executor pods as SPARK_EXECUTOR_EXTRA_CLASSPATH; set it with "
            "spark.executorEnv.*"
        ),
        "spark.executor.extraJavaOptions": (
            "Spark passes it to executor pods as SPARK_JAVA_OPT_n variables; set them with "
            "spark.executorEnv.*"
        ),
        "spark.executor.extraLibraryPath": (
            "Spark passes it to executor pods' environment; set it with spark.executorEnv.*"
        ),
    }
)
"""Spark 4.3 keys that change executor pods in Spark and that execpods does not implement yet."""


def _listed(table: Mapping[str, str], key: str) -> str | None:
    if key in table:
        return table[key]
    for family, reason in table.items():
        if family.endswith(".") and key.startswith(family) and len(key) > len(family):
            return reason
    return None


def listed_status(key: str) -> tuple[KeyStatus, str] | None:
    """Whether `key` is listed here as not applicable or not implemented, and why."""
    reason = _listed(NOT_IMPLEMENTED, key)
    if reason is not None:
        return KeyStatus.NOT_IMPLEMENTED, reason
    reason = _listed(NOT_APPLICABLE, key)
    if reason is not None:
        return KeyStatus.NOT_APPLICABLE, reason
    return None


def listed_keys() -> list[str]:
    """Every key and family listed here."""
    return sorted({*NOT_APPLICABLE, *NOT_IMPLEMENTED})


def parse_key_snapshot(text: str) -> dict[str, str]:
    """`tools/spark-keys.tsv` (key, tab, Spark's default; a family ends in '.') as a mapping."""
    keys: dict[str, str] = {}
    for line in text.splitlines():
        key, _, default = line.partition("\t")
        keys[key] = default
    return keys


DEPRECATED_ALIASES: Mapping[str, str] = MappingProxyType(
    {"spark.kubernetes.allocation.batch.concurrency": "execpods.allocation.batch.concurrency"}
)
"""Old name -> execpods' own name, for execpods settings once documented under Spark's names
(`batch.concurrency` is not a Spark 4.3 key). The old name still works, with a warning."""
