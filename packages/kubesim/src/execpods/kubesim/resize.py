"""In-place pod resize (the `pods/resize` subresource) and the resource metrics API.

As kube-apiserver serves them (KEP 1287, beta in Kubernetes 1.33):

- `/resize` takes an update (PUT) or a patch of the whole pod, of which only
  `spec.containers[*].resources` (and a sidecar init container's) may change, and only their
  `cpu` and `memory`; the pod's QoS class may not change; every other change, or a resize of a
  pod in a terminal phase, is 422 Invalid naming the field. The main resource still refuses any
  change to resources (`pods` updates, in `resources.py`).
- The kubelet then actuates the resize: after `RESIZE_LATENCY` the container statuses report the
  new resources (`status.containerStatuses[*].resources`, `allocatedResources` = requests), and
  the `PodResizeInProgress` condition it showed meanwhile goes. Every resize fits: the simulated
  nodes count pods, not CPU or memory, so nothing is Deferred or Infeasible.
- `GET /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods` lists PodMetrics (what metrics-server
  serves, `kubectl top pods`): each Running pod's containers with the usage a test set
  (`ResourceUsage.set`), 0 when none was.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable

from execpods.kubesim.errors import ApiError
from execpods.kubesim.pods import qos_class
from execpods.kubesim.quantities import parse_quantity
from execpods.kubesim.store import Obj

__all__ = ["RESIZE_LATENCY", "ResourceUsage", "actuated", "resized_spec"]

RESIZE_LATENCY = 0.1
"""Seconds the kubelet takes to actuate a resize."""
RESIZABLE = ("cpu", "memory")
METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/namespaces/"


def _forbidden(name: str, field: str, message: str) -> ApiError:
    return ApiError.invalid(
        name, [{"reason": "FieldValueForbidden", "message": message, "field": field}]
    )


def _without_resources(spec: Obj) -> Obj:
    view = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for container in view.get(key) or []:
            container.pop("resources", None)
    return view


def resized_spec(old: Obj, new: Obj, name: str, *, phase: str) -> Obj:
    """The spec a resize of `old` to `new` leaves, or the API server's 422."""
    if phase in ("Succeeded", "Failed"):
        raise _forbidden(name, "spec", "Forbidden: a pod in a terminal phase cannot be resized")
    if not isinstance(new, dict):
        raise ApiError.bad_request("the request body must be a pod object")
    if _without_resources(old) != _without_resources(new):
        raise _forbidden(
            name,
            "spec",
            "Forbidden: only cpu and memory resources of containers are mutable through the "
            "resize subresource",
        )
    for key in ("containers", "initContainers"):
        for index, (before, after) in enumerate(
            zip(old.get(key) or [], new.get(key) or [], strict=False)
        ):
            for part in ("requests", "limits"):
                was = (before.get("resources") or {}).get(part) or {}
                now = (after.get("resources") or {}).get(part) or {}
                for resource in set(was) | set(now):
                    if resource in RESIZABLE or was.get(resource) == now.get(resource):
                        continue
                    raise _forbidden(
                        name,
                        f"spec.{key}[{index}].resources.{part}[{resource}]",
                        "Forbidden: only cpu and memory resources are mutable",
                    )
            if (
                key == "initContainers"
                and before.get("resources") != after.get("resources")
                and before.get("restartPolicy") != "Always"
            ):
                raise _forbidden(
                    name,
                    f"spec.initContainers[{index}].resources",
                    "Forbidden: resources of a non-restartable init container are immutable",
                )
    if qos_class(old.get("containers") or []) != qos_class(new.get("containers") or []):
        raise _forbidden(
            name,
            "spec.containers",
            "Forbidden: Pod QOS Class may not change as a result of resizing",
        )
    return copy.deepcopy(new)


def actuated(pod: Obj) -> Obj:
    """The kubelet's report once a resize is actuated: each container's status carries its
    spec resources, and PodResizeInProgress is gone."""
    spec_resources = {
        c["name"]: copy.deepcopy(c.get("resources") or {}) for c in pod["spec"]["containers"]
    }
    status = pod.setdefault("status", {})
    for container_status in status.get("containerStatuses") or []:
        resources = spec_resources.get(container_status.get("name"))
        if resources is None:
            continue
        container_status["resources"] = resources
        container_status["allocatedResources"] = dict(resources.get("requests") or {})
    status["conditions"] = [
        c for c in status.get("conditions") or [] if c.get("type") != "PodResizeInProgress"
    ]
    return pod


def in_progress(pod: Obj, now: str) -> Obj:
    """The pod while the kubelet actuates its resize: condition PodResizeInProgress."""
    status = pod.setdefault("status", {})
    conditions = [
        c for c in status.get("conditions") or [] if c.get("type") != "PodResizeInProgress"
    ]
    conditions.append({"type": "PodResizeInProgress", "status": "True", "lastTransitionTime": now})
    status["conditions"] = conditions
    return pod


class ResourceUsage:
    """What the metrics API reports each container uses (tests set it; 0 otherwise)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[tuple[str, str, str], dict[str, str]] = {}

    def set(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        memory: str | None = None,
        cpu: str | None = None,
    ) -> None:
        with self._lock:
            usage = self._usage.setdefault((namespace, pod, container), {})
            if memory is not None:
                parse_quantity(memory)  # a bad quantity is the caller's error, now
                usage["memory"] = memory
            if cpu is not None:
                parse_quantity(cpu)
                usage["cpu"] = cpu

    def pod_metrics(self, namespace: str, pods: Iterable[Obj], timestamp: str) -> Obj:
        """PodMetricsList of the Running pods among `pods`."""
        items = []
        with self._lock:
            for pod in pods:
                if (pod.get("status") or {}).get("phase") != "Running":
                    continue
                name = pod["metadata"]["name"]
                containers = []
                for container in pod["spec"]["containers"]:
                    usage = self._usage.get((namespace, name, container["name"]), {})
                    containers.append(
                        {
                            "name": container["name"],
                            "usage": {
                                "cpu": usage.get("cpu", "0"),
                                "memory": usage.get("memory", "0"),
                            },
                        }
                    )
                items.append(
                    {
                        "metadata": {
                            "name": name,
                            "namespace": namespace,
                            "labels": dict(pod["metadata"].get("labels") or {}),
                        },
                        "timestamp": timestamp,
                        "window": "30s",
                        "containers": containers,
                    }
                )
        return {
            "kind": "PodMetricsList",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": items,
        }
