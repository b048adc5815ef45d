"""The JSON bodies kubesim reads and writes, typed at its API boundary.

Request bodies arrive as :data:`JsonValue` (whatever the client sent) and are checked before
use. What the simulator answers is typed by kind: a :class:`Pod`, a :class:`PodList`, a
:class:`WatchEvent` and the :class:`Status` every error carries. The shapes follow the
Kubernetes API (camelCase keys); only the fields kubesim reads or writes are spelled out, and
``total=False`` because a stored object holds only the fields it was given or defaulted.
Internally the store keeps plain dicts (:data:`execpods.kubesim.store.Obj`): patches and the
kubelet rewrite them field by field, and every stored object was admitted as a pod.
"""

from __future__ import annotations

from typing import TypeAlias, TypedDict, cast

__all__ = [
    "Container",
    "ContainerState",
    "ContainerStatus",
    "JsonObject",
    "JsonValue",
    "ListMeta",
    "ObjectMeta",
    "Pod",
    "PodCondition",
    "PodList",
    "PodSpec",
    "PodStatus",
    "Status",
    "StatusCause",
    "StatusDetails",
    "WatchEvent",
    "as_pod",
    "as_pods",
]

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]


class StatusCause(TypedDict, total=False):
    reason: str
    message: str
    field: str


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    causes: list[StatusCause]
    retryAfterSeconds: int


class Status(TypedDict):
    """A v1 Status: every error, and what health paths answer."""

    kind: str
    apiVersion: str
    metadata: dict[str, str]
    status: str
    message: str
    reason: str
    details: StatusDetails
    code: int


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    ownerReferences: list[JsonObject]


class Container(TypedDict, total=False):
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[JsonObject]
    resources: JsonObject
    imagePullPolicy: str


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    restartPolicy: str
    nodeName: str
    schedulerName: str
    serviceAccountName: str
    terminationGracePeriodSeconds: int
    activeDeadlineSeconds: int
    dnsPolicy: str
    tolerations: list[JsonObject]
    volumes: list[JsonObject]


class ContainerStateDetail(TypedDict, total=False):
    """One of waiting, running or terminated: the fields any of them carries."""

    reason: str
    message: str
    exitCode: int
    signal: int
    startedAt: str
    finishedAt: str
    containerID: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateDetail
    running: ContainerStateDetail
    terminated: ContainerStateDetail


class ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    imageID: str
    containerID: str
    ready: bool
    started: bool
    restartCount: int
    state: ContainerState
    lastState: ContainerState


class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastProbeTime: str | None
    lastTransitionTime: str


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]
    hostIP: str
    podIP: str
    podIPs: list[dict[str, str]]
    startTime: str
    qosClass: str
    nominatedNodeName: str


class Pod(TypedDict, total=False):
    kind: str
    apiVersion: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


ListMeta = TypedDict(
    "ListMeta", {"resourceVersion": str, "continue": str, "remainingItemCount": int}, total=False
)


class PodList(TypedDict):
    kind: str
    apiVersion: str
    metadata: ListMeta
    items: list[Pod]


class WatchEvent(TypedDict):
    """One line of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK (a Pod with only a
    resourceVersion) or ERROR (a Status)."""

    type: str
    object: Pod | Status


def as_pod(obj: dict[str, object]) -> Pod:
    """A stored object as the pod it is: the store admits nothing but pods."""
    return cast(Pod, obj)


def as_pods(objs: list[dict[str, object]]) -> list[Pod]:
    return cast(list[Pod], objs)
