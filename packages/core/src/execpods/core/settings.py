"""Typed settings keyed by Spark's property names.

Each settings class is a frozen dataclass whose fields declare their property key, default, parser,
rule and meaning through `setting(...)`. `from_properties` reads a `spark.*` style mapping, and
every value is validated on construction, so a bad value fails at start-up with a message naming
the property and the rule, never half-way through a run. Other packages declare their own settings
classes the same way; the sidecar composes them into one object.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from execpods.core.errors import SettingsError
from execpods.core.labels import ExecutorLabels

T = TypeVar("T")

_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration(text: str, *, default_unit: str = "ms") -> float:
    """Seconds in a Spark-style duration ("500ms", "30s", "3min", "1h"; a bare number is ms)."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 30s, 3min or 1h")
    number, unit = match.groups()
    factor = _UNITS.get(unit or default_unit)
    if factor is None:
        raise ValueError(f"{text!r} has unknown unit {unit!r}; use one of {', '.join(_UNITS)}")
    return float(number) * factor


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def parse_str(text: str) -> str:
    return text


def positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must not be negative"


def _optional_positive(value: float | None) -> str | None:
    return None if value is None else positive(value)


def any_value(_value: object) -> str | None:
    return None


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_value(value: str) -> str | None:
    """A non-empty Kubernetes label value: the API refuses pods labelled with anything else."""
    if _LABEL_NAME.match(value):
        return None
    return "must be a label value: up to 63 letters, digits, '-', '_' or '.', alphanumeric ends"


def label_key(value: str) -> str | None:
    """A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a label name."""
    prefix, _, name = value.rpartition("/")
    if _LABEL_NAME.match(name) and (
        not prefix or (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix))
    ):
        return None
    return "must be a label key: [prefix/]name, the name up to 63 letters, digits, '-', '_', '.'"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """How one property is read and checked."""

    key: str
    parse: Callable[[str], Any]
    rule: Callable[[Any], str | None]
    doc: str


def setting(
    key: str,
    default: T,
    doc: str,
    *,
    parse: Callable[[str], T],
    rule: Callable[[T], str | None] = any_value,
) -> T:
    """Declare a settings field: its property key, default, parser, rule and meaning."""
    spec = SettingSpec(key=key, parse=parse, rule=rule, doc=doc)
    return dataclasses.field(default=default, metadata={"setting": spec})


def duration_setting(
    key: str, default: str, doc: str, rule: Callable[[float], str | None] = positive
) -> float:
    """A duration field: declared with Spark's spelling, held in seconds."""
    return setting(key, parse_duration(default), doc, parse=parse_duration, rule=rule)


class SettingsBase:
    """Parsing and validation shared by every settings dataclass."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for spec, value in self._specs_and_values():
            problem = spec.rule(value)
            if problem is not None:
                raise SettingsError(f"{spec.key}={value!r} is invalid: it {problem}")

    def _specs_and_values(self) -> list[tuple[SettingSpec, Any]]:
        return [
            (f.metadata["setting"], getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if "setting" in f.metadata
        ]

    @classmethod
    def specs(cls) -> dict[str, SettingSpec]:
        """Every property this class reads, by key."""
        return {
            f.metadata["setting"].key: f.metadata["setting"]
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if "setting" in f.metadata
        }

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: Any) -> Self:
        """Read the properties this class knows (others are ignored: see `unknown_keys`)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            spec = f.metadata.get("setting")
            if spec is None or spec.key not in properties:
                continue
            try:
                values[f.name] = spec.parse(properties[spec.key])
            except ValueError as error:
                raise SettingsError(f"{spec.key}: {error}") from None
        values.update(overrides)
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        """The settings as property strings (durations in ms); unset optional ones are left out."""
        rendered: dict[str, str] = {}
        for spec, value in self._specs_and_values():
            if value is None:
                continue
            if isinstance(value, bool):
                rendered[spec.key] = str(value).lower()
            elif isinstance(value, float):
                rendered[spec.key] = f"{round(value * 1000)}ms"
            else:
                rendered[spec.key] = str(value)
        return rendered


def unknown_keys(properties: Mapping[str, str], *classes: type[SettingsBase]) -> list[str]:
    """The keys none of `classes` reads: almost always a typo worth refusing."""
    known: set[str] = set()
    for cls in classes:
        known.update(cls.specs())
    return sorted(key for key in properties if key not in known)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreSettings(SettingsBase):
    """What the store, the allocator, the lifecycle manager and the backend read."""

    initial_executors: int = setting(
        "spark.executor.instances",
        2,
        "Executors requested at start.",
        parse=parse_int,
        rule=non_negative,
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
        "How long the lifecycle manager remembers an executor it reported removed.",
    )
    max_num_failures: int | None = setting(
        "spark.executor.maxNumFailures",
        None,
        "Executor failures (creation failures included) after which the application fails; "
        "unset: max(2 x executors, 3), executors being spark.dynamicAllocation.maxExecutors "
        "with dynamic allocation, else spark.executor.instances.",
        parse=parse_int,
        rule=_optional_positive,
    )
    failures_validity_interval: float | None = setting(
        "spark.executor.failuresValidityInterval",
        None,
        "Failures older than this no longer count towards spark.executor.maxNumFailures; unset: "
        "they always count.",
        parse=parse_duration,
        rule=_optional_positive,
    )
    dynamic_allocation_enabled: bool = setting(
        "spark.dynamicAllocation.enabled",
        False,
        "Whether the driver scales executors itself (read for the failure limit's default).",
        parse=parse_bool,
    )
    dynamic_allocation_max_executors: int = setting(
        "spark.dynamicAllocation.maxExecutors",
        2**31 - 1,
        "Most executors under dynamic allocation (read for the failure limit's default).",
        parse=parse_int,
        rule=non_negative,
    )
    delete_grace_period: float = duration_setting(
        "spark.kubernetes.dynamicAllocation.deleteGracePeriod",
        "5s",
        "After KillExecutors deleted pods with their own grace period, executors still Running "
        "this much later are deleted with grace period 0.",
    )
    enable_polling_with_resource_version: bool = setting(
        "spark.kubernetes.executor.enablePollingWithResourceVersion",
        False,
        "Poll with resourceVersion=0: the API server answers from its cache, not from etcd.",
        parse=parse_bool,
    )

    @property
    def max_executor_failures(self) -> int:
        """`spark.executor.maxNumFailures`, or Spark's default for it."""
        if self.max_num_failures is not None:
            return self.max_num_failures
        executors = (
            self.dynamic_allocation_max_executors
            if self.dynamic_allocation_enabled
            else self.initial_executors
        )
        return max(3, min(2 * executors, 2**31 - 1))

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
