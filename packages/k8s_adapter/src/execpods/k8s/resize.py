"""The core's `ResizeOperations` over the API: memory use from the metrics API, in-place resize.

As Spark's `ExecutorResizeDriverPlugin` reads and writes them: the application's executor pods
(not labelled inactive) are listed, their memory use read from `metrics.k8s.io/v1beta1`
PodMetrics (what metrics-server serves), and a resize is a strategic merge patch of the pod's
`resize` subresource setting the executor container's memory limit and request to the same number
of bytes. The executor container is the one named
`spark.kubernetes.executor.podTemplateContainerName` (Spark's `spark-kubernetes-executor` by
default), else the first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from execpods.core import SPARK_LABELS, ExecutorLabels, MemoryUse, PodSelector
from execpods.k8s.gateway import ApiGateway

__all__ = ["KubernetesResizer", "quantity_bytes"]

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity_bytes(quantity: object) -> int | None:
    """A Kubernetes memory quantity ("1536Mi", "1.5Gi", "1e9", 1073741824) in whole bytes, or
    None when it is not one."""
    if isinstance(quantity, int | float) and not isinstance(quantity, bool):
        return int(quantity)
    if not isinstance(quantity, str):
        return None
    match = _QUANTITY.match(quantity.strip())
    if match is None or match.group(2) not in _SUFFIXES:
        return None
    try:
        return int(Decimal(match.group(1)) * _SUFFIXES[match.group(2)])
    except InvalidOperation:
        return None


def _container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    named = [c for c in containers if c.get("name") == name]
    return named[0] if named else (containers[0] if containers else None)


class KubernetesResizer:
    """Reads executors' memory use and resizes them in place, through the gateway."""

    def __init__(
        self,
        gateway: ApiGateway,
        *,
        container_name: str,
        labels: ExecutorLabels = SPARK_LABELS,
    ) -> None:
        self._gateway = gateway
        self._container_name = container_name
        self._labels = labels

    def _selector(self, app_id: str) -> str:
        return PodSelector.active_executors_of(self._labels, app_id).label_selector()

    def memory_uses(self, app_id: str) -> list[MemoryUse]:
        selector = self._selector(app_id)
        pods = self._gateway.list_pods(selector)
        metrics = self._gateway.list_pod_metrics(selector)
        usage: dict[tuple[str, str], int] = {}
        for item in (metrics.get("items") if isinstance(metrics, dict) else None) or []:
            pod_name = str((item.get("metadata") or {}).get("name", ""))
            for container in item.get("containers") or []:
                used = quantity_bytes((container.get("usage") or {}).get("memory"))
                if used is not None:
                    usage[(pod_name, str(container.get("name", "")))] = used
        uses = []
        for pod in (pods.get("items") if isinstance(pods, dict) else None) or []:
            metadata = pod.get("metadata") or {}
            if (pod.get("status") or {}).get("phase") != "Running" or metadata.get(
                "deletionTimestamp"
            ):
                continue
            container = _container(pod, self._container_name)
            if container is None:
                continue
            limits = (container.get("resources") or {}).get("limits") or {}
            limit = quantity_bytes(limits.get("memory"))
            used = usage.get((str(metadata.get("name")), str(container.get("name"))))
            if limit is None or used is None:
                continue
            uses.append(
                MemoryUse(
                    pod=str(metadata["name"]),
                    container=str(container["name"]),
                    limit_bytes=limit,
                    usage_bytes=used,
                )
            )
        return uses

    def resize_memory(self, pod: str, container: str, memory_bytes: int) -> None:
        amount = str(memory_bytes)
        resources = {"limits": {"memory": amount}, "requests": {"memory": amount}}
        self._gateway.resize_pod(  # the very patch Spark's plugin sends (a Pod, strategic merge)
            pod,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {},
                "spec": {"containers": [{"name": container, "resources": resources}]},
            },
        )
