"""In-place pod resize (the `pods/resize` subresource) and the resource metrics API.

As kube-apiserver serves them (KEP 1287; checked against a real kube-apiserver 1.36 in
tests/kubesim/test_conformance_resize.py):

- `/resize` takes an update (PUT) or a patch of the whole pod, of which it keeps only the
  containers' resources (and a sidecar init container's): every other change in the body is
  dropped, silently, as the API server's resize strategy does. The resources may change only in
  `cpu` and `memory`, and the pod's QoS class may not change (422, `spec`); a running container
  whose status has no `resources` means its node does not support resize (422).
- The kubelet actuates the resize (`nodes.py`, the shared node simulation): after
  `nodes.RESIZE_LATENCY` the container statuses report the new resources
  (`status.containerStatuses[*].resources`, `allocatedResources` = requests). Every resize fits:
  the simulated nodes count pods, not CPU or memory, so nothing is Deferred or Infeasible.
- `GET /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods[/<name>]` lists PodMetrics (what
  metrics-server serves, `kubectl top pods`): each Running pod's containers with the usage a test
  set (`ResourceUsage.set`), 0 when none was.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable

from execpods.kubesim.errors import ApiError
from execpods.kubesim.pods import qos_class
from execpods.kubesim.quantities import parse_quantity
from execpods.kubesim.store import Obj

__all__ = ["ResourceUsage", "resized_spec"]

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


def _resources_from(old: Obj, new: Obj) -> Obj:
    """`old` with only the containers' resources of `new` (by position, as the API server's
    resize strategy copies them); everything else of `new` is dropped."""
    spec = copy.deepcopy(old)
    for key in ("containers", "initContainers"):
        for before, after in zip(spec.get(key) or [], new.get(key) or [], strict=False):
            if isinstance(after, dict) and "resources" in after:
                before["resources"] = copy.deepcopy(after["resources"])
    return spec


def resized_spec(old: Obj, new: Obj, name: str, *, statuses: Iterable[Obj] = ()) -> Obj:
    """The spec a resize of `old` to `new` leaves, or the API server's 422 (`statuses`: the
    pod's container statuses, whose `resources` say the node supports resize)."""
    if not isinstance(new, dict):
        raise ApiError.bad_request("the request body must be a pod object")
    spec = _resources_from(old, new)
    if spec == old:
        return spec
    if any(
        (s.get("state") or {}).get("running") is not None and s.get("resources") is None
        for s in statuses
    ):
        raise _forbidden(name, "spec", "Forbidden: Pod running on node without support for resize")
    for key in ("containers", "initContainers"):
        for index, (before, after) in enumerate(
            zip(old.get(key) or [], spec.get(key) or [], strict=False)
        ):
            if (
                key == "initContainers"
                and before.get("resources") != after.get("resources")
                and before.get("restartPolicy") != "Always"
            ):
                raise _forbidden(
                    name,
                    f"spec.initContainers[{index}].resources",
                    "Forbidden: resources for non-sidecar init containers are immutable",
                )
            for part in ("requests", "limits"):
                was = (before.get("resources") or {}).get(part) or {}
                now = (after.get("resources") or {}).get(part) or {}
                changed = {r for r in set(was) | set(now) if was.get(r) != now.get(r)}
                if changed - set(RESIZABLE):
                    raise _forbidden(
                        name, "spec", "Forbidden: only cpu and memory resources are mutable"
                    )
    if qos_class(old.get("containers") or []) != qos_class(spec.get("containers") or []):
        raise _forbidden(
            name, "spec", "Forbidden: Pod QOS Class may not change as a result of resizing"
        )
    return spec


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
