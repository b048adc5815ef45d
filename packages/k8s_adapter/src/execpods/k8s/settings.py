"""The adapter's settings, keyed by Spark's property names where Spark has one.

Declared like `execpods.core.CoreSettings`: every field names its property, default, parser and
rule, so a bad value fails at start-up with a `SettingsError` naming the property. The enable flags
and the polling interval are the core's (`CoreSettings`); the sources take both objects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from execpods.core import SettingsError
from execpods.core.settingkit import (
    SettingsBase,
    duration_setting,
    if_set,
    label_key,
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
)
from execpods.k8s.mounts import (
    SECRET_KEY_REF_PREFIX,
    SECRETS_PREFIX,
    VOLUMES_PREFIX,
    volume_key_problem,
)
from execpods.k8s.operations import DEFAULT_PAGE_SIZE

ENV_PREFIX = "spark.executorEnv."
"""Properties `spark.executorEnv.NAME=value` put `NAME=value` into every executor's environment."""

MIB = 1024 * 1024
MEMORY_OVERHEAD_FACTOR = 0.10
MEMORY_OVERHEAD_MIN_MIB = 384

_MEMORY = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_MEMORY_UNITS = {
    "": MIB,  # a bare number is MiB, as in Spark
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": MIB,
    "mb": MIB,
    "g": 1024 * MIB,
    "gb": 1024 * MIB,
    "t": 1024 * 1024 * MIB,
    "tb": 1024 * 1024 * MIB,
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_CPU = re.compile(r"^\d+(\.\d+)?m?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def parse_memory_mib(text: str) -> int:
    """MiB in a JVM-style size ("4g", "512m", "2048"; a bare number is MiB, as in Spark)."""
    match = _MEMORY.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a size such as 512m or 4g")
    number, unit = match.groups()
    factor = _MEMORY_UNITS.get(unit)
    if factor is None:
        raise ValueError(f"{text!r} has unknown unit {unit!r}; use k, m, g or t")
    return math.ceil(int(number) * factor / MIB)


def parse_optional_memory(text: str) -> int | None:
    return None if not text.strip() else parse_memory_mib(text)


def parse_cpu(text: str) -> str | None:
    """A Kubernetes CPU quantity ("1", "0.5", "500m"), kept as the API spells it."""
    stripped = text.strip()
    if not stripped:
        return None
    if _CPU.match(stripped) is None:
        raise ValueError(f"{text!r} is not a CPU quantity such as 1, 0.5 or 500m")
    return stripped


def _http_url(value: str) -> str | None:
    return (
        None if value.startswith(("http://", "https://")) else "must be an http:// or https:// URL"
    )


def _env_name(name: str) -> str | None:
    return None if _ENV_NAME.match(name) else "is not an environment variable name"


def _dns_subdomain(name: str) -> str | None:
    if len(name) <= 253 and _DNS_SUBDOMAIN.match(name):
        return None
    return "is not a secret name (a DNS-1123 subdomain)"


def _pull_policy(value: str) -> str | None:
    if value in ("Always", "Never", "IfNotPresent"):
        return None
    return "must be Always, Never or IfNotPresent"


def parse_optional_float(text: str) -> float | None:
    return None if not text.strip() else parse_float(text)


def parse_list(text: str) -> tuple[str, ...]:
    """A comma-separated list, blanks dropped (Spark's `toSequence`)."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_seconds(text: str) -> int:
    """Whole seconds of a Spark time in seconds ("30s", "2min"; a bare number is seconds)."""
    return round(parse_duration(text, default_unit="s"))


def _render_seconds(value: int) -> str:
    return f"{value}s"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


POD_NAME_PREFIX_MAX = 253 - 10 - len("-exec-")
"""Spark's `Config.isValidExecutorPodNamePrefix`: room for `-exec-` and an int id in 253."""


def _pod_name_prefix(value: str) -> str | None:
    """Spark 4.3's check of spark.kubernetes.executor.podNamePrefix: a DNS-1123 subdomain (dots
    allowed) of at most 237 characters."""
    if len(value) <= POD_NAME_PREFIX_MAX and _DNS_SUBDOMAIN.match(value):
        return None
    return (
        "must conform https://kubernetes.io/docs/concepts/overview/working-with-objects/names/"
        f"#dns-subdomain-names and the value length <= {POD_NAME_PREFIX_MAX}"
    )


def _dns_label(value: str) -> str | None:
    if _DNS_LABEL.match(value) is None:
        return "must be a DNS-1123 label (lowercase letters, digits and '-')"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class KubernetesSettings(SettingsBase):
    """Cluster access, executor pod shape, and the watch/poll/request timings."""

    namespace: str | None = setting(
        "spark.kubernetes.namespace",
        None,
        "Namespace of the executor pods; default: the service account's when in-cluster, else "
        "'default'.",
        parse=parse_optional_str,
        flag="--namespace",
        env="EXECPODS_NAMESPACE",
    )
    context: str | None = setting(
        "spark.kubernetes.context",
        None,
        "Kubeconfig context to use (default: the kubeconfig's current context).",
        parse=parse_optional_str,
        flag="--context",
        env="EXECPODS_CONTEXT",
    )
    api_url: str | None = setting(
        "execpods.kubernetes.apiUrl",
        None,
        "Explicit API server URL (no kubeconfig, no credentials), e.g. a simulator.",
        parse=parse_optional_str,
        rule=if_set(_http_url),
        flag="--api-url",
        env="EXECPODS_API_URL",
    )
    kubeconfig: str | None = setting(
        "execpods.kubernetes.kubeconfig",
        None,
        "Kubeconfig file, or a list of files (a:b) merged as kubectl merges them (default: "
        "$KUBECONFIG or ~/.kube/config; in-cluster when absent).",
        parse=parse_optional_str,
        flag="--kubeconfig",
        env="EXECPODS_KUBECONFIG",
    )
    container_image: str | None = setting(
        "spark.kubernetes.container.image",
        None,
        "Default container image.",
        parse=parse_optional_str,
    )
    executor_image: str | None = setting(
        "spark.kubernetes.executor.container.image",
        None,
        "Executor container image (default: spark.kubernetes.container.image).",
        parse=parse_optional_str,
        flag="--image",
        env="EXECPODS_IMAGE",
    )
    pod_template_file: str | None = setting(
        "spark.kubernetes.executor.podTemplateFile",
        None,
        "YAML pod template the executor pods start from.",
        parse=parse_optional_str,
        flag="--pod-template",
        env="EXECPODS_POD_TEMPLATE",
    )
    pod_name_prefix: str | None = setting(
        "spark.kubernetes.executor.podNamePrefix",
        None,
        "Executor pod names are <prefix>-exec-<id> (default prefix: the app id); as Spark, a DNS "
        "subdomain (dots allowed) of at most 237 characters.",
        parse=parse_optional_str,
        rule=if_set(_pod_name_prefix),
    )
    driver_pod_name: str | None = setting(
        "spark.kubernetes.driver.pod.name",
        None,
        "Driver pod; executors get an owner reference to it so they die with it.",
        parse=parse_optional_str,
        flag="--driver-pod-name",
        env="EXECPODS_DRIVER_POD_NAME",
    )
    executor_cores: int = setting(
        "spark.executor.cores",
        1,
        "Cores per executor (the CPU request unless request.cores is set).",
        parse=parse_int,
        rule=positive,
        flag="--executor-cores",
    )
    request_cores: str | None = setting(
        "spark.kubernetes.executor.request.cores",
        None,
        "CPU request of the executor container (a Kubernetes quantity).",
        parse=parse_cpu,
    )
    limit_cores: str | None = setting(
        "spark.kubernetes.executor.limit.cores",
        None,
        "CPU limit of the executor container (none by default).",
        parse=parse_cpu,
    )
    executor_memory_mib: int = setting(
        "spark.executor.memory",
        1024,
        "Executor heap (JVM-style size; a bare number is MiB).",
        parse=parse_memory_mib,
        rule=positive,
        default_text="1g",
        flag="--executor-memory",
    )
    memory_overhead_mib: int | None = setting(
        "spark.executor.memoryOverhead",
        None,
        "Off-heap overhead (default: 10% of the memory, at least 384 MiB).",
        parse=parse_optional_memory,
        rule=if_set(positive),
    )
    memory_overhead_factor: float | None = setting(
        "spark.executor.memoryOverheadFactor",
        None,
        "Overhead as a fraction of the memory when memoryOverhead is unset "
        "(default: spark.kubernetes.memoryOverheadFactor).",
        parse=parse_optional_float,
        rule=if_set(positive),
    )
    kubernetes_memory_overhead_factor: float = setting(
        "spark.kubernetes.memoryOverheadFactor",
        MEMORY_OVERHEAD_FACTOR,
        "Overhead fraction when neither memoryOverhead nor spark.executor.memoryOverheadFactor "
        "is set.",
        parse=parse_float,
        rule=non_negative,
    )
    min_memory_overhead_mib: int = setting(
        "spark.executor.minMemoryOverhead",
        MEMORY_OVERHEAD_MIN_MIB,
        "Least overhead when memoryOverhead is unset.",
        parse=parse_memory_mib,
        rule=non_negative,
        default_text="384m",
    )
    executor_labels: Mapping[str, str] = setting_family(
        "spark.kubernetes.executor.label.",
        "Labels added to every executor pod ({{APP_ID}} and {{EXECUTOR_ID}} in a value are "
        "replaced); the labels execpods selects its pods by cannot be set this way.",
        name_rule=label_key,
    )
    executor_annotations: Mapping[str, str] = setting_family(
        "spark.kubernetes.executor.annotation.",
        "Annotations added to every executor pod ({{APP_ID}} and {{EXECUTOR_ID}} replaced).",
        name_rule=label_key,
    )
    node_selector: Mapping[str, str] = setting_family(
        "spark.kubernetes.node.selector.",
        "Node selector of the driver and executor pods.",
        name_rule=label_key,
    )
    executor_node_selector: Mapping[str, str] = setting_family(
        "spark.kubernetes.executor.node.selector.",
        "Node selector of the executor pods, on top of spark.kubernetes.node.selector.*.",
        name_rule=label_key,
    )
    secrets: Mapping[str, str] = setting_family(
        SECRETS_PREFIX,
        "Secrets mounted into the executor container: NAME is the secret, the value the path.",
        name_rule=_dns_subdomain,
    )
    secret_key_refs: Mapping[str, str] = setting_family(
        SECRET_KEY_REF_PREFIX,
        "Environment variables of the executor container from secrets: NAME is the variable, "
        "the value secret:key.",
        name_rule=_env_name,
    )
    volumes: Mapping[str, str] = setting_family(
        VOLUMES_PREFIX,
        "Volumes mounted into the executor container: TYPE.NAME.mount.path (required), "
        "mount.readOnly, mount.subPath, mount.subPathExpr and options.* of hostPath, emptyDir, "
        "nfs or persistentVolumeClaim.",
        name_rule=volume_key_problem,
    )
    executor_scheduler_name: str | None = setting(
        "spark.kubernetes.executor.scheduler.name",
        None,
        "Scheduler of the executor pods (default: spark.kubernetes.scheduler.name).",
        parse=parse_optional_str,
    )
    scheduler_name: str | None = setting(
        "spark.kubernetes.scheduler.name",
        None,
        "Scheduler of the driver and executor pods (default: the cluster's).",
        parse=parse_optional_str,
    )
    image_pull_policy: str = setting(
        "spark.kubernetes.container.image.pullPolicy",
        "IfNotPresent",
        "Image pull policy of the executor container: Always, Never or IfNotPresent.",
        parse=str.strip,
        rule=_pull_policy,
    )
    image_pull_secrets: tuple[str, ...] = setting(
        "spark.kubernetes.container.image.pullSecrets",
        (),
        "Comma-separated secrets for pulling images from private registries.",
        parse=parse_list,
        render=",".join,
        default_text="",
    )
    executor_service_account: str | None = setting(
        "spark.kubernetes.authenticate.executor.serviceAccountName",
        None,
        "Service account of the executor pods (default: the driver's, "
        "spark.kubernetes.authenticate.driver.serviceAccountName).",
        parse=parse_optional_str,
    )
    driver_service_account: str | None = setting(
        "spark.kubernetes.authenticate.driver.serviceAccountName",
        None,
        "The driver's service account: the executors' too unless they have their own.",
        parse=parse_optional_str,
    )
    watch_timeout: float = duration_setting(
        "execpods.kubernetes.watchTimeout",
        "5min",
        "Server-side timeoutSeconds of each watch request; the watch is renewed after it.",
        rule=lambda v: None if v >= 1 else "must be at least 1s",
    )
    request_timeout: float = duration_setting(
        "execpods.kubernetes.requestTimeout",
        "30s",
        "Client-side timeout of every non-watch API request.",
    )
    list_page_size: int = setting(
        "execpods.kubernetes.listPageSize",
        DEFAULT_PAGE_SIZE,
        "Pods per page of the watch's and the poll's lists (limit and continue, as client-go "
        "pages); 0 lists in one answer. Pages keep the API server's answers and the sidecar's "
        "memory small at thousands of executors.",
        parse=parse_int,
        rule=non_negative,
    )
    backoff_initial: float = duration_setting(
        "execpods.kubernetes.backoffInitial",
        "500ms",
        "First retry delay after a 5xx or a refused connection, for the watch and (through the "
        "gateway's shared back-off) every other API call: exponential, full jitter.",
    )
    backoff_max: float = duration_setting(
        "execpods.kubernetes.backoffMax",
        "30s",
        "Longest retry delay of the watch and of the shared API back-off.",
    )
    executor_env: Mapping[str, str] = setting_family(
        ENV_PREFIX,
        "Environment variables of the executor container (spark.executorEnv.NAME=value).",
        name_rule=_env_name,
    )

    driver_readiness_timeout: float = duration_setting(
        "spark.kubernetes.allocation.driver.readinessTimeout",
        "1s",
        "At start, how long to wait for the driver pod (spark.kubernetes.driver.pod.name) to be "
        "Ready before creating the first executors; after it they are created anyway. A bare "
        "number is seconds, as in Spark.",
        unit="s",
    )
    driver_publishes_not_ready: bool = setting(
        "spark.kubernetes.driver.service.publishNotReadyAddresses",
        False,
        "The driver's Service publishes its address before the driver pod is Ready, so executors "
        "reach it at once: as Spark's ExecutorPodsAllocator, the readiness wait is skipped.",
        parse=parse_bool,
    )

    # Graceful decommission and the container's security context (Spark 4.3's executor step).
    termination_grace_period_seconds: int = setting(
        "spark.kubernetes.executor.terminationGracePeriodSeconds",
        30,
        "terminationGracePeriodSeconds of the executor pods: how long a deleted executor may take "
        "to stop (and, with spark.decommission.enabled, to migrate its blocks). A bare number is "
        "seconds, as in Spark.",
        parse=parse_seconds,
        rule=non_negative,
        default_text="30s",
        render=_render_seconds,
    )
    decommission_enabled: bool = setting(
        "spark.decommission.enabled",
        False,
        "Executors decommission gracefully when their pod is deleted: the executor container "
        "gets a preStop hook running spark.kubernetes.decommission.script, as in Spark.",
        parse=parse_bool,
    )
    decommission_script: str = setting(
        "spark.kubernetes.decommission.script",
        "/opt/decom.sh",
        "The preStop command of the executor container under spark.decommission.enabled.",
        parse=parse_str,
        rule=_non_empty,
    )
    allow_privilege_escalation: bool = setting(
        "spark.kubernetes.securityContext.allowPrivilegeEscalation",
        False,
        "securityContext.allowPrivilegeEscalation of the driver and executor containers.",
        parse=parse_bool,
    )
    executor_allow_privilege_escalation: bool | None = setting(
        "spark.kubernetes.executor.securityContext.allowPrivilegeEscalation",
        None,
        "securityContext.allowPrivilegeEscalation of the executor container; unset: "
        "spark.kubernetes.securityContext.allowPrivilegeEscalation.",
        parse=parse_bool,
    )

    def __post_init__(self) -> None:
        SettingsBase.__post_init__(self)
        if self.backoff_max < self.backoff_initial:
            raise SettingsError(
                f"{self.key_of('backoff_max')}={self.backoff_max!r} is invalid: it must not be "
                f"below {self.key_of('backoff_initial')}={self.backoff_initial!r}"
            )

    @property
    def image(self) -> str | None:
        """The executor image: the executor-specific one, else the common one."""
        return self.executor_image or self.container_image

    @property
    def memory_overhead(self) -> int:
        """MiB of overhead: explicit, else Spark's max(factor x memory, minMemoryOverhead), the
        factor being spark.executor.memoryOverheadFactor, else spark.kubernetes's (0.1)."""
        if self.memory_overhead_mib is not None:
            return self.memory_overhead_mib
        factor = self.memory_overhead_factor
        if factor is None:
            factor = self.kubernetes_memory_overhead_factor
        return max(int(self.executor_memory_mib * factor), self.min_memory_overhead_mib)

    @property
    def executor_scheduler(self) -> str | None:
        """The executor pods' scheduler: the executor-specific one, else the common one."""
        return self.executor_scheduler_name or self.scheduler_name

    @property
    def service_account(self) -> str | None:
        """The executor pods' service account: their own, else the driver's."""
        return self.executor_service_account or self.driver_service_account

    @property
    def node_selectors(self) -> dict[str, str]:
        """The executor pods' node selector: the common one, then the executor-specific one."""
        return {**self.node_selector, **self.executor_node_selector}

    @property
    def pod_memory_mib(self) -> int:
        """The container's memory request and limit: heap plus overhead."""
        return self.executor_memory_mib + self.memory_overhead

    @property
    def executor_privilege_escalation(self) -> bool:
        """The executor container's allowPrivilegeEscalation: its own, else the common one."""
        own = self.executor_allow_privilege_escalation
        return self.allow_privilege_escalation if own is None else own

    @property
    def cpu_request(self) -> str:
        return self.request_cores or str(self.executor_cores)


def is_known_key(key: str) -> bool:
    """Whether this class reads `key` (including the `spark.executorEnv.` family)."""
    return KubernetesSettings.reads(key)


__all__ = ["KubernetesSettings", "is_known_key", "parse_memory_mib"]
