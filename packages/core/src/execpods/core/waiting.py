"""Why an executor waits: each Pending executor's reason, read from its pod as Kubernetes says.

"Why is my job stuck?" has a handful of answers, each in a different place of a pod:

- `UNSCHEDULABLE`: condition PodScheduled=False, reason Unschedulable. No node fits; the
  scheduler's message says why ("0/3 nodes are available: 3 Insufficient cpu.").
- `SCHEDULING_GATED`: PodScheduled=False, reason SchedulingGated. A scheduling gate holds the
  pod (a queue such as Kueue admits it later).
- `IMAGE_PULL`: a container waiting in ErrImagePull, ImagePullBackOff, InvalidImageName or
  ErrImageNeverPull. The image cannot be pulled.
- `CONTAINER_CONFIG`: a container waiting in CreateContainerConfigError, CreateContainerError or
  RunContainerError. The container cannot be made (a missing ConfigMap key or Secret).
- `CRASH_LOOP`: a container waiting in CrashLoopBackOff. An init or sidecar container keeps
  crashing.
- `FAILED_MOUNT`: a Warning event FailedMount while the containers are still ContainerCreating.
  A volume cannot be mounted (a missing Secret or ConfigMap, a claim that does not attach).

The first that applies, in that order (an unscheduled pod has no containers to wait; an init
container's trouble comes before the main containers', which wait for it). A pod with none of
them is simply starting: no reason. A fourth answer has no pod at all, the namespace's quota
(`quota.py`): the executors it keeps out are counted as waiting for `QUOTA`.

Pure functions of the pod: the sidecar puts the reason on every snapshot it streams (so it
reaches the driver with the pod event that says it, and clears with the one that clears it) and
counts them by reason for the metrics.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from execpods.core.pods import ContainerStatus, ContainerWaiting, ExecutorPod
from execpods.core.states import ExecutorState, ObservedPod

__all__ = ["PendingReason", "WaitingFor", "count_waiting", "waiting_for"]


class PendingReason(enum.Enum):
    """Why a Pending executor is not running yet (the contract's `PendingReason`)."""

    UNSCHEDULABLE = "Unschedulable"
    SCHEDULING_GATED = "SchedulingGated"
    IMAGE_PULL = "ImagePull"
    CONTAINER_CONFIG = "ContainerConfig"
    CRASH_LOOP = "CrashLoop"
    FAILED_MOUNT = "FailedMount"
    QUOTA = "Quota"
    """Not a pod's: executors the namespace's quota keeps from being created."""


_IMAGE_PULL = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
_CONTAINER_CONFIG = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
_BY_WAITING = {
    **dict.fromkeys(_IMAGE_PULL, PendingReason.IMAGE_PULL),
    **dict.fromkeys(_CONTAINER_CONFIG, PendingReason.CONTAINER_CONFIG),
    "CrashLoopBackOff": PendingReason.CRASH_LOOP,
}
_NOT_SCHEDULED = {
    "Unschedulable": PendingReason.UNSCHEDULABLE,
    "SchedulingGated": PendingReason.SCHEDULING_GATED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingFor:
    """A pending executor's reason, with Kubernetes' own words."""

    reason: PendingReason
    api_reason: str
    """The reason as the API spelled it ("Unschedulable", "ImagePullBackOff", "FailedMount")."""
    message: str
    """The scheduler's or the kubelet's message ("0/3 nodes are available: ..."); may be empty."""

    def describe(self) -> str:
        return f"{self.api_reason}: {self.message}" if self.message else self.api_reason


def _container_trouble(statuses: Iterable[ContainerStatus]) -> WaitingFor | None:
    for status in statuses:
        state = status.state
        if not isinstance(state, ContainerWaiting) or state.reason is None:
            continue
        reason = _BY_WAITING.get(state.reason)
        if reason is not None:
            message = state.message or ""
            return WaitingFor(
                reason=reason,
                api_reason=state.reason,
                message=f"container {status.name}: {message}"
                if message
                else f"container {status.name}",
            )
    return None


def _creating(pod: ExecutorPod) -> bool:
    """Whether the pod's volumes may still be mounting: its sandbox is not ready
    (PodReadyToStartContainers, which the kubelet sets once the volumes are mounted, is not True)
    and its containers are all still to be made (waiting ContainerCreating, or none reported)."""
    ready = pod.condition("PodReadyToStartContainers")
    if ready is not None and ready.status == "True":
        return False
    for status in pod.container_statuses:
        state = status.state
        if not (
            isinstance(state, ContainerWaiting) and state.reason in (None, "ContainerCreating")
        ):
            return False
    return True


def pod_waiting_for(pod: ExecutorPod) -> WaitingFor | None:
    """Why this (Pending) pod waits, or None when nothing says it is stuck."""
    scheduled = pod.condition("PodScheduled")
    if scheduled is not None and scheduled.status == "False":
        reason = _NOT_SCHEDULED.get(scheduled.reason or "")
        if reason is not None:
            return WaitingFor(
                reason=reason,
                api_reason=scheduled.reason or reason.value,
                message=scheduled.message or "",
            )
    trouble = _container_trouble(pod.init_container_statuses) or _container_trouble(
        pod.container_statuses
    )
    if trouble is not None:
        return trouble
    warning = pod.warning
    if warning is not None and warning.reason == "FailedMount" and _creating(pod):
        return WaitingFor(
            reason=PendingReason.FAILED_MOUNT, api_reason=warning.reason, message=warning.message
        )
    return None


def waiting_for(observed: ObservedPod) -> WaitingFor | None:
    """Why this executor waits: its pod's reason while it is Pending, else None."""
    if observed.state is not ExecutorState.PENDING:
        return None
    return pod_waiting_for(observed.pod)


def count_waiting(observed: Iterable[ObservedPod]) -> Counter[PendingReason]:
    """Pending executors by reason (those with none are not counted)."""
    counts: Counter[PendingReason] = Counter()
    for one in observed:
        why = waiting_for(one)
        if why is not None:
            counts[why.reason] += 1
    return counts
