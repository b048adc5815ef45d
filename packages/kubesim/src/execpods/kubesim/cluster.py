"""kubesim's cluster: the shared node simulation (``nodes.py``) over kubesim's own pod store,
plus what the API server itself does on a delete.

The nodes act on the store through :class:`StorePort`, the in-process twin of
:mod:`execpods.kubesim.nodesim`'s HTTP port: a bind sets ``spec.nodeName`` and
``PodScheduled=True`` as the ``binding`` subresource does, a status write changes the stored
pod under the store's lock, and events go to the served Event objects.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from execpods.kubesim.clock import Clock
from execpods.kubesim.errors import ApiError
from execpods.kubesim.mounts import VolumeMounts
from execpods.kubesim.nodes import (
    ANNOTATION_PREFIX,
    ClusterConfig,
    NodeInfo,
    NodeSimulation,
)
from execpods.kubesim.pods import TERMINAL_PHASES, rfc3339
from execpods.kubesim.podstatus import condition
from execpods.kubesim.store import Event, Obj, PodStore

__all__ = ["ANNOTATION_PREFIX", "Cluster", "ClusterConfig", "NodeInfo", "StorePort"]

Key = tuple[str, str]


class StorePort:
    """The node simulation's :class:`~execpods.kubesim.nodes.PodPort` over kubesim's store."""

    def __init__(self, store: PodStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        #: Where events go (kubesim sets it to its served Events; None drops them).
        self.events: Callable[[str, Obj], object] | None = None
        self._event_seq = itertools.count(1)

    def find(self, namespace: str, name: str) -> Obj | None:
        return self.store.find(namespace, name)

    def write_status(
        self, namespace: str, name: str, uid: str, mutate: Callable[[Obj], Obj | None]
    ) -> Obj | None:
        # The uid is checked inside the store's locked update: a pod deleted and recreated
        # under the same name between a check and the write must not receive the change.
        same_pod = False

        def mutate_if_same_pod(pod: Obj) -> Obj | None:
            nonlocal same_pod
            same_pod = pod["metadata"].get("uid") == uid
            return mutate(pod) if same_pod else None

        try:
            updated = self.store.update(namespace, name, mutate_if_same_pod)
        except ApiError:
            return None
        return updated if same_pod else None

    def bind(self, namespace: str, name: str, uid: str, node: str, now: str) -> Obj | None:
        def bind(p: Obj) -> Obj | None:
            if p["spec"].get("nodeName"):
                return None
            p["spec"]["nodeName"] = node
            condition(p.setdefault("status", {}), "PodScheduled", "True", now)
            return p

        return self.write_status(namespace, name, uid, bind)

    def remove(self, namespace: str, name: str, uid: str) -> None:
        """A delete with grace period 0: the pending deletion is shortened to now first (a
        MODIFIED, as kube-apiserver writes it), then the object goes (DELETED)."""
        pod = self.store.find(namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid:
            return
        now = rfc3339(self.clock.now())
        self.write_status(namespace, name, uid, lambda p: _deleting_now(p, now))
        left = self.store.find(namespace, name)
        if left is not None and not left["metadata"].get("finalizers"):
            self.store.remove(namespace, name, uid)

    def record_event(
        self, pod: Obj, *, type_: str, reason: str, message: str, component: str
    ) -> None:
        if self.events is None:
            return
        meta = pod["metadata"]
        now = rfc3339(self.clock.now())
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{next(self._event_seq):016x}"},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": "",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.events(meta["namespace"], event)


class Cluster(NodeSimulation):
    """The simulated scheduler and kubelets over kubesim's store, and the API server's delete."""

    def __init__(self, store: PodStore, clock: Clock, config: ClusterConfig) -> None:
        self.store_port = StorePort(store, clock)
        super().__init__(self.store_port, clock, config)
        self.store = store
        #: The kubelet's Secret and ConfigMap mounts (set by KubeSim, which serves those objects).
        self.mounts: VolumeMounts | None = None
        self.start_checks.append(self._mounts_ready)
        store.add_listener(self.on_event)
        store.add_listener(self._finish_delete)

    def _finish_delete(self, event: Event) -> None:
        """The API server's part: an object being deleted with grace period 0 goes as soon as
        its last finalizer does."""
        meta = event.new["metadata"]
        if event.type != "MODIFIED" or not meta.get("deletionTimestamp"):
            return
        if not meta.get("finalizers") and meta.get("deletionGracePeriodSeconds") == 0:
            self.store.remove(meta["namespace"], meta["name"], meta["uid"])

    def bind(self, namespace: str, name: str, node: str) -> None:
        """A Binding (POST pods/NAME/binding): set the node of an unscheduled pod, as another
        scheduler does. 409 when it already has one, as the API server answers. The kubelet
        starts it on the MODIFIED event, as on a real cluster."""
        pod = self.store.get(namespace, name)
        bound = pod["spec"].get("nodeName")
        if bound:
            raise ApiError.conflict(name, f'pod {name} is already assigned to node "{bound}"')
        now = rfc3339(self.clock.now())
        self.store_port.bind(namespace, name, pod["metadata"]["uid"], node, now)

    def _mounts_ready(self, pod: Obj) -> float | None:
        return None if self.mounts is None else self.mounts.start_check(pod)

    def delete(
        self,
        namespace: str,
        name: str,
        *,
        grace_period: int | None = None,
        preconditions: Mapping[str, object] | None = None,
    ) -> Obj:
        """Delete as the API server does: at once for unscheduled or terminated pods (or a zero
        grace period), otherwise mark with ``deletionTimestamp`` and let the kubelet finish.
        Finalizers hold the object until they are removed; re-deleting only shortens the grace."""
        pod = self.store.get(namespace, name)
        meta = pod["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise ApiError.conflict(name, "the UID in the precondition does not match")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise ApiError.conflict(name, "the ResourceVersion in the precondition does not match")
        uid: str = meta["uid"]
        grace = grace_period
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        grace = max(0, grace)
        immediate = (
            grace == 0
            or not pod["spec"].get("nodeName")
            or pod.get("status", {}).get("phase") in TERMINAL_PHASES
        )
        now = self.clock.now()
        if immediate and not meta.get("finalizers"):
            # kube-apiserver marks the object (deletionTimestamp now, grace 0: a MODIFIED)
            # before it removes it (DELETED), for every pod delete.
            marked = self.store.update(namespace, name, lambda p: _deleting_now(p, rfc3339(now)))
            removed = self.store.remove(namespace, name, uid)
            return removed if removed is not None else marked
        if immediate:
            grace = 0

        def mark(p: Obj) -> Obj | None:
            m = p["metadata"]
            current = m.get("deletionGracePeriodSeconds")
            if current is not None and current <= grace:
                return None
            m["deletionTimestamp"] = rfc3339(now + grace)
            m["deletionGracePeriodSeconds"] = grace
            return p

        # The kubelet sees the marked pod through the store's event (NodeSimulation.on_event).
        return self.store.update(namespace, name, mark)


def _deleting_now(pod: Obj, now: str) -> Obj | None:
    """Shorten a pod's deletion to now (grace period 0); None if it already is."""
    meta = pod["metadata"]
    if meta.get("deletionGracePeriodSeconds") == 0 and meta.get("deletionTimestamp"):
        return None
    meta["deletionTimestamp"] = now
    meta["deletionGracePeriodSeconds"] = 0
    return pod
