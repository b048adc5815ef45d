"""Disruptions: pods that Kubernetes itself ends, marked as Kubernetes marks them.

Since Kubernetes 1.26 a pod that the cluster (not its own containers) ends first gets the
`DisruptionTarget` condition, whose reason says who ended it; the Job controller's
`podFailurePolicy` and controllers like execpods read it to tell a disruption from a failure:

- `Evicted` (the kubelet, under node pressure): reason `TerminationByKubelet`; the containers
  are killed (137), the pod fails with `status.reason` Evicted;
- `Preempted` (the scheduler): reason `PreemptionByScheduler`; a graceful delete;
- `DeletionByTaintManager` (a NoExecute taint): reason `DeletionByTaintManager`; a graceful
  delete;
- `EvictionByEvictionAPI` (`POST .../pods/NAME/eviction`): reason `EvictionByEvictionAPI`; a
  graceful delete.

A graceful delete ends as any does in kubesim: the kubelet stops the containers (143, phase
Failed), and the pod is removed (or held by its finalizers).
"""

from __future__ import annotations

from execpods.kubesim.cluster import Cluster
from execpods.kubesim.errors import ApiError
from execpods.kubesim.pods import rfc3339
from execpods.kubesim.podstatus import condition
from execpods.kubesim.store import Obj

__all__ = ["CAUSES", "DISRUPTION_TARGET", "disrupt"]

DISRUPTION_TARGET = "DisruptionTarget"

CAUSES: dict[str, str] = {
    "Evicted": "TerminationByKubelet",
    "Preempted": "PreemptionByScheduler",
    "DeletionByTaintManager": "DeletionByTaintManager",
    "EvictionByEvictionAPI": "EvictionByEvictionAPI",
}
"""Each cause and the reason its `DisruptionTarget` condition carries."""

_MESSAGES = {
    "Evicted": "The node was low on resource: memory.",
    "Preempted": "Preempted in order to admit critical pod",
    "DeletionByTaintManager": "Taint manager: deleting due to NoExecute taint",
    "EvictionByEvictionAPI": "Eviction API: evicting",
}


def disrupt(cluster: Cluster, namespace: str, name: str, cause: str, message: str = "") -> Obj:
    """Mark the pod `DisruptionTarget` for `cause` and end it as that cause does (see above)."""
    if cause not in CAUSES:
        raise ValueError(f"unknown disruption cause {cause!r}; use one of {sorted(CAUSES)}")
    text = message or _MESSAGES[cause]
    pod = cluster.store.find(namespace, name)
    if pod is None:
        raise ApiError.not_found(name)
    if cause == "Evicted":
        # The kubelet writes the condition with the Failed phase in one status update.
        ended = cluster.evict(namespace, name, text)
    else:
        now = rfc3339(cluster.clock.now())

        def mark(p: Obj) -> Obj:
            status = p.setdefault("status", {})
            condition(status, DISRUPTION_TARGET, "True", now, reason=CAUSES[cause], message=text)
            return p

        cluster.store.update(namespace, name, mark)
        ended = cluster.delete(namespace, name)
    if ended is None:
        raise ApiError.not_found(name)
    return ended
