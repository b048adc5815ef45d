"""Volume binding: a PersistentVolumeClaim's phase, and pods that wait for their claims.

A real cluster provisions a claim's volume through its StorageClass, whose `volumeBindingMode` says
when: `Immediate` binds the claim as soon as it exists; `WaitForFirstConsumer` leaves it `Pending`
until a pod that uses it is scheduled (the volume is then made in that node's zone). The scheduler,
for its part, does not place a pod that names a claim which does not exist yet: the pod stays
Pending and Unschedulable (`persistentvolumeclaim "x" not found`) until the claim appears. Spark
creates an executor's pod before its OnDemand claims, so both sides of that race are real.

kubesim serves no StorageClass objects: the binding mode of each class is configuration
(`ClaimBinding.wait_for_first_consumer`); every other class, and a claim without one, binds
Immediately. Access modes, the ReadWriteOncePod single-user rule and volume expansion are not
modelled.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from execpods.kubesim.cluster import Cluster
from execpods.kubesim.errors import ApiError
from execpods.kubesim.objects import ObjectApi
from execpods.kubesim.store import Event, Obj, PodStore

__all__ = ["WAIT_FOR_FIRST_CONSUMER_CLASS", "ClaimBinding", "claim_names"]

#: The StorageClass kubesim treats as `WaitForFirstConsumer` unless told otherwise.
WAIT_FOR_FIRST_CONSUMER_CLASS = "kubesim-wait-for-first-consumer"


def claim_names(pod: Obj) -> list[str]:
    """The claims a pod's volumes name, in order."""
    names = []
    for volume in pod.get("spec", {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if isinstance(source, dict) and isinstance(source.get("claimName"), str):
            names.append(source["claimName"])
    return names


class ClaimBinding:
    """Binds claims (at once, or when a pod that uses them is scheduled) and holds back pods whose
    claims do not exist yet."""

    def __init__(
        self,
        *,
        claims: ObjectApi,
        pods: PodStore,
        cluster: Cluster,
        wait_for_first_consumer: Iterable[str] = (WAIT_FOR_FIRST_CONSUMER_CLASS,),
    ) -> None:
        self._claims = claims
        self._cluster = cluster
        self._lock = threading.Lock()
        self.wait_for_first_consumer = set(wait_for_first_consumer)
        claims.on_create = self._provision
        claims.store.add_listener(self._on_claim_event)
        pods.add_listener(self._on_pod_event)
        cluster.schedule_checks.append(self._missing_claim)

    def _provision(self, claim: Obj) -> None:
        spec = claim.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        if spec.get("storageClassName") in self.wait_for_first_consumer:
            claim["status"] = {"phase": "Pending"}
        else:
            _bind(claim, node=None)

    def _on_claim_event(self, event: Event) -> None:
        if event.type == "ADDED":  # a pod may have been waiting for this claim
            self._cluster.retry_unschedulable()

    def _missing_claim(self, pod: Obj) -> str | None:
        namespace = pod["metadata"]["namespace"]
        for name in claim_names(pod):
            if self._claims.store.find(namespace, name) is None:
                return f'persistentvolumeclaim "{name}" not found.'
        return None

    def _on_pod_event(self, event: Event) -> None:
        node = event.new.get("spec", {}).get("nodeName")
        was = (event.old or {}).get("spec", {}).get("nodeName")
        if event.type == "DELETED" or not node or node == was:
            return
        namespace = event.new["metadata"]["namespace"]
        for name in claim_names(event.new):
            claim = self._claims.store.find(namespace, name)
            if claim is None or claim.get("status", {}).get("phase") != "Pending":
                continue
            try:
                self._claims.store.update(namespace, name, lambda c: _bound(c, node))
            except ApiError as err:  # deleted meanwhile
                if err.code != 404:
                    raise


def _bound(claim: Obj, node: str) -> Obj:
    _bind(claim, node=node)
    return claim


def _bind(claim: Obj, *, node: str | None) -> None:
    spec = claim.setdefault("spec", {})
    spec["volumeName"] = f"pvc-{claim['metadata']['uid']}"
    requests = (spec.get("resources") or {}).get("requests") or {}
    status: Obj = {"phase": "Bound", "accessModes": list(spec.get("accessModes") or [])}
    if "storage" in requests:
        status["capacity"] = {"storage": requests["storage"]}
    claim["status"] = status
    annotations = claim["metadata"].setdefault("annotations", {})
    annotations["pv.kubernetes.io/bind-completed"] = "yes"
    if node is not None:
        annotations["volume.kubernetes.io/selected-node"] = node
