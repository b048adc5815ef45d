"""The kubelet's wait for a pod's Secret and ConfigMap volumes, with its FailedMount events.

A real kubelet does not start a pod whose Secret or ConfigMap volume (directly or in a projected
volume) names an object that does not exist, unless the reference is `optional`: the pod stays
Pending, its containers waiting in `ContainerCreating`, and a Warning event `FailedMount`
(`MountVolume.SetUp failed for volume "v" : secret "s" not found`) is recorded and counted up
while the kubelet retries. Once the object exists, the next retry starts the pod. Users' tests of
a forgotten Secret must see that here too, not a pod that runs.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from execpods.kubesim.errors import ApiError
from execpods.kubesim.store import Obj

__all__ = ["MOUNT_RETRY_SECONDS", "VolumeMounts", "missing_volume", "served_mounts"]

MOUNT_RETRY_SECONDS = (0.5, 122.0)
"""The kubelet's retries of a failed mount: from 0.5 s, doubling, up to 2 min 2 s."""


def _references(pod: Obj) -> Iterator[tuple[str, str, str]]:
    """(volume, kind, name) of every non-optional Secret and ConfigMap the pod mounts."""
    for volume in pod.get("spec", {}).get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        name = str(volume.get("name", ""))
        secret = volume.get("secret")
        if isinstance(secret, dict) and not secret.get("optional"):
            yield name, "secret", str(secret.get("secretName", ""))
        config_map = volume.get("configMap")
        if isinstance(config_map, dict) and not config_map.get("optional"):
            yield name, "configmap", str(config_map.get("name", ""))
        projected = volume.get("projected")
        for source in (projected or {}).get("sources") or [] if isinstance(projected, dict) else []:
            for key, kind in (("secret", "secret"), ("configMap", "configmap")):
                ref = source.get(key) if isinstance(source, dict) else None
                if isinstance(ref, dict) and not ref.get("optional"):
                    yield name, kind, str(ref.get("name", ""))


def missing_volume(pod: Obj, exists: Any) -> str | None:
    """The kubelet's message for the first volume whose object `exists(kind, ns, name)` denies."""
    namespace = pod["metadata"].get("namespace", "default")
    for volume, kind, name in _references(pod):
        if not exists(kind, namespace, name):
            return f'MountVolume.SetUp failed for volume "{volume}" : {kind} "{name}" not found'
    return None


class VolumeMounts:
    """The kubelet's mount check, over any way to look objects up and record events: kubesim's
    served stores in process (:func:`served_mounts`), or an API server (``nodesim``)."""

    def __init__(
        self,
        *,
        exists: Callable[[str, str, str], bool],
        record: Callable[[Obj, str], None],
    ) -> None:
        self._exists = exists
        self._record = record
        self._lock = threading.Lock()
        self._retries: dict[str, float] = {}

    def problem(self, pod: Obj) -> str | None:
        return missing_volume(pod, self._exists)

    def failed(self, pod: Obj, message: str) -> float:
        """Record (or count once more) the Warning event FailedMount on the pod; returns how long
        the kubelet waits before it tries again (doubling per pod)."""
        meta = pod["metadata"]
        first, most = MOUNT_RETRY_SECONDS
        with self._lock:
            delay = self._retries.get(meta.get("uid", ""), first / 2) * 2
            self._retries[meta.get("uid", "")] = delay = min(delay, most)
        self._record(pod, message)
        return delay

    def start_check(self, pod: Obj) -> float | None:
        """None when every volume object exists, else the wait before the kubelet's next try."""
        problem = self.problem(pod)
        return None if problem is None else self.failed(pod, problem)


def served_mounts(*, objects: Mapping[str, Any], now: Callable[[], str]) -> VolumeMounts:
    """The check over kubesim's served stores, its events counted up on each retry."""
    rng = random.Random("kubesim-events")
    lock = threading.Lock()

    def exists(kind: str, namespace: str, name: str) -> bool:
        api = objects.get(f"{kind}s")
        return api is not None and api.store.find(namespace, name) is not None

    def record(pod: Obj, message: str) -> None:
        events = objects.get("events")
        if events is None:
            return
        meta = pod["metadata"]
        namespace, stamp = meta.get("namespace", "default"), now()
        for event in events.store.list(namespace)[0]:
            involved = event.get("involvedObject") or {}
            if involved.get("uid") == meta.get("uid") and event.get("message") == message:
                count = int(event.get("count", 1)) + 1
                updated = {**event, "count": count, "lastTimestamp": stamp}
                # A client changed it meanwhile: the next retry counts again.
                with contextlib.suppress(ApiError):
                    events.replace(namespace, event["metadata"]["name"], updated)
                return
        with lock:
            suffix = f"{rng.getrandbits(64):016x}"
        events.create(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{suffix}"},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "namespace": namespace,
                    "uid": meta.get("uid", ""),
                },
                "reason": "FailedMount",
                "message": message,
                "type": "Warning",
                "count": 1,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
                "reportingComponent": "kubelet",
            },
        )

    return VolumeMounts(exists=exists, record=record)
