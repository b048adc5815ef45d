"""The pod model the reconcilers read: a core-owned, immutable value.

Core never sees a client library's objects. The adapter converts whatever the API returned (raw
JSON, ideally) into these values, so the reconcilers stay pure and cheap to test, and a malformed
pod is rejected once at the edge instead of surprising a reconciler later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeAlias

PodManifest: TypeAlias = dict[str, Any]
"""A pod as the Kubernetes API spells it in JSON (what a builder makes and `create` sends)."""

_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})

EXECUTOR_CONTAINER_NAME = "spark-kubernetes-executor"
"""The executor container's name in Spark-built pods: its state speaks for the executor."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerWaiting:
    """The container has not started yet (for example `ContainerCreating`, `ErrImagePull`)."""

    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerRunning:
    """The container is running."""

    started_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerTerminated:
    """The container has exited; `exit_code` is what the driver is told the executor died of."""

    exit_code: int
    reason: str | None = None
    message: str | None = None
    signal: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    """When the container ran (the crash-loop brake tells a failure at start by how long)."""


ContainerState: TypeAlias = ContainerWaiting | ContainerRunning | ContainerTerminated


@dataclass(frozen=True, slots=True, kw_only=True)
class PodCondition:
    """One entry of `status.conditions` (`PodScheduled`, `Ready`, `DisruptionTarget`...)."""

    type: str
    status: str
    """"True", "False" or "Unknown", as the API spells it."""
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerStatus:
    """One entry of `status.containerStatuses`."""

    name: str
    state: ContainerState | None = None
    ready: bool = False
    restart_count: int = 0
    image: str | None = None

    def describe(self) -> str:
        """A stable, human-readable rendering used in exit messages (Spark uses toString)."""
        parts = [f"name={self.name}"]
        if self.image is not None:
            parts.append(f"image={self.image}")
        match self.state:
            case ContainerTerminated(exit_code=code, reason=reason, message=message):
                parts.append(
                    f"state=terminated(exitCode={code}, reason={reason}, message={message})"
                )
            case ContainerWaiting(reason=reason, message=message):
                parts.append(f"state=waiting(reason={reason}, message={message})")
            case ContainerRunning():
                parts.append("state=running")
            case None:
                parts.append("state=unknown")
        parts.append(f"ready={str(self.ready).lower()}")
        parts.append(f"restartCount={self.restart_count}")
        return "ContainerStatus(" + ", ".join(parts) + ")"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodWarning:
    """A Warning event about a pod (reason and message as the kubelet wrote them)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorPod:
    """The fields of a pod that the allocator and lifecycle manager read.

    `labels` is stored as a read-only mapping; equality compares every field, so two snapshots
    built from the same API state compare equal.
    """

    name: str
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY_LABELS)
    uid: str | None = None
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    container_statuses: tuple[ContainerStatus, ...] = ()
    node_name: str | None = None
    pod_ip: str | None = None
    resource_version: str | None = None
    restart_policy: str | None = None
    executor_id: int | None = None
    """The executor id its id label carries, parsed once where the pod is converted (the
    adapter); None when it was not parsed there (a pod made by hand): the snapshot then reads the
    label itself, and skips a pod whose label is missing or invalid."""
    disruption: str | None = None
    """Why Kubernetes disrupted the pod, when its `DisruptionTarget` condition is True: the
    condition's reason (`EvictionByEvictionAPI`, `PreemptionByScheduler`,
    `DeletionByTaintManager`, `TerminationByKubelet`...), else "DisruptionTarget"."""
    claim_names: tuple[str, ...] = ()
    """The PersistentVolumeClaims its volumes name (a claim in use is not reused)."""
    conditions: tuple[PodCondition, ...] = ()
    """`status.conditions`: why a pod waits (PodScheduled False, Unschedulable, with the
    scheduler's words) and what failure rules match on (`failurerules.py`)."""
    init_container_statuses: tuple[ContainerStatus, ...] = ()
    """`status.initContainerStatuses`: a failing init container is why an executor never
    starts, and its exit code is one failure rules may match."""
    warning: PodWarning | None = None
    """The newest Warning event about the pod that its status cannot show (FailedMount: the
    kubelet cannot mount a volume, the containers stay ContainerCreating); the adapter reads it
    from the pod's events."""
    gone: bool = False
    """The API reported the pod deleted (a watch DELETED event): it no longer exists, whatever
    its last status said (a force-deleted pod's last status can still read Running)."""
    """`spec.restartPolicy` ("Never" for Spark's executors): with Never, a container that exited
    stays exited, which is what lets `checkAllContainers` fail the pod on any container."""

    def __post_init__(self) -> None:
        if not isinstance(self.labels, MappingProxyType):
            object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    @property
    def is_deleted(self) -> bool:
        """A pod with a deletion timestamp is on its way out, whatever its phase says."""
        return self.deletion_timestamp is not None

    def executor_container(self, name: str = EXECUTOR_CONTAINER_NAME) -> ContainerStatus | None:
        """The status of the container named `name` (the executor's), if the pod reports it."""
        for status in self.container_statuses:
            if status.name == name:
                return status
        return None

    def condition(self, condition_type: str) -> PodCondition | None:
        """The pod's condition of this type, if the API reported one."""
        for condition in self.conditions:
            if condition.type == condition_type:
                return condition
        return None

    def executor_exit_code(self, name: str = EXECUTOR_CONTAINER_NAME) -> int | None:
        """The exit code of the executor container `name`, once it terminated (SPARK-49804).

        Only that container speaks for the executor: a sidecar container listed first that exited
        differently must not be reported as the executor's exit code.
        """
        return self.terminated_exit_code(name)

    def terminated_exit_code(self, container_name: str | None = None) -> int | None:
        """The exit code of the named container, or of the first terminated one when unnamed."""
        for status in self.container_statuses:
            if container_name is not None and status.name != container_name:
                continue
            if isinstance(status.state, ContainerTerminated):
                return status.state.exit_code
        return None
