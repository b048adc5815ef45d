"""Simulated nodes: a scheduler and a kubelet per node, over any pod API (kwok's idea).

One implementation of node behaviour, driven by pod events and acting through a small
:class:`PodPort`: kubesim runs it in process over its own store (``cluster.py``), and
:mod:`execpods.kubesim.nodesim` runs the same class against any API server (a real
kube-apiserver) over HTTP, binding through the ``binding`` subresource and writing through
``pods/status``. Every action is a timer on a clock, so under kubesim's virtual clock a test
decides exactly when pods get scheduled, start, crash or finish terminating. Randomness (start
latency, random failures) comes from one seeded generator so runs are reproducible.

What the nodes do, as the real components do it:

- the scheduler binds a pending pod to the ready node with the fewest pods that it fits
  (pod slots, cpu and memory requests against the node's allocatable, required node affinity),
  or marks it ``PodScheduled=False`` reason ``Unschedulable`` with kube-scheduler's message
  (:mod:`execpods.kubesim.fit`) and a Warning event ``FailedScheduling`` (once per message, where
  kube-scheduler's event series would count repeats); waiting pods get another try when a pod
  leaves a node or a node comes;
- the kubelet starts a bound pod after the start latency; a container image it cannot pull
  goes ``ErrImagePull``, then ``ImagePullBackOff`` while it backs off (10 s doubling to 300 s),
  then is pulled again, with the kubelet's ``Failed`` and ``BackOff`` events; a container that
  exits is restarted by the restart policy, waiting in ``CrashLoopBackOff`` (message
  ``back-off 10s restarting failed container=NAME pod=NAME_NS(UID)``) for the same back-off;
- on a graceful delete (``deletionTimestamp`` set) the kubelet stops the containers after
  ``min(grace period, stop_latency)`` (exit code 143, phase Failed; 137 when they would outlive
  the grace period, the kubelet's SIGKILL at its end), then deletes the pod with
  grace period 0 (the object goes once its finalizers are gone), as it deletes any finished pod
  that is being deleted;
- scenario hooks any client language can use are pod annotations:
  ``kubesim.execpods.io/exit-after`` (seconds after start the containers exit),
  ``kubesim.execpods.io/exit-code`` (their exit code, default 0),
  ``kubesim.execpods.io/oom-after`` (seconds after start they are OOMKilled) and
  ``kubesim.execpods.io/image-pull-failure: "true"``.

The simulation is three modules: :mod:`execpods.kubesim.nodestate` (configuration, the port,
shared state), :mod:`execpods.kubesim.kubelet` (the kubelet) and this one (the scheduler, pod
events and nodes coming and going).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from execpods.kubesim.fit import (
    NodeFit,
    Request,
    node_reasons,
    pod_request,
    unschedulable_message,
)
from execpods.kubesim.kubelet import RESIZE_LATENCY, Kubelet
from execpods.kubesim.nodestate import (
    ANNOTATION_PREFIX,
    SCHEDULER,
    ClusterConfig,
    Key,
    NodeInfo,
    PodPort,
    restart_backoff,
)
from execpods.kubesim.pods import TERMINAL_PHASES
from execpods.kubesim.podstatus import condition, resize_actuated, resize_pending
from execpods.kubesim.store import Event, Obj

__all__ = [
    "ANNOTATION_PREFIX",
    "ClusterConfig",
    "NodeInfo",
    "NodeSimulation",
    "PodPort",
    "restart_backoff",
]

_log = logging.getLogger(__name__)


class NodeSimulation(Kubelet):
    """Scheduler and kubelet simulation, reacting to pod events (:meth:`on_event`)."""

    # -- pod events ----------------------------------------------------------------------------

    def resync(self, pods: Iterable[Obj]) -> None:
        """After the API server's state went back (a restore from a backup): forget the pods
        that are gone, and take up the ones that are back, as kubelets and the scheduler do
        when their informers re-list."""
        current = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        with self._lock:
            tracked = set(self._node_of) | set(self._unschedulable)
        for key in tracked - set(current):
            self._release(key)
        for key, pod in current.items():
            if key not in tracked:
                self.on_event(Event(0, "ADDED", None, pod))

    def _release(self, key: Key) -> None:
        with self._lock:
            node = self._node_of.pop(key, None)
            request = self._request_of.pop(key, Request())
            if node is not None:
                self._bound[node].discard(key)
                self._used[node] = self._used.get(node, Request()) - request
            self._unschedulable.pop(key, None)
            self._stopping.pop(key, None)
            if node is not None:
                self._retry_unschedulable_soon()

    def _retry_unschedulable_soon(self) -> None:
        # Caller holds the lock. Space has freed or a node came: waiting pods get another try.
        if self._unschedulable:
            self.clock.call_later(0.0, self._retry_unschedulable)

    def on_event(self, event: Event) -> None:
        """React to one pod event, as the scheduler's and kubelets' informers do."""
        pod = event.new
        meta = pod["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        uid = meta["uid"]
        if event.type == "ADDED":
            node = pod["spec"].get("nodeName")
            if node:
                if pod.get("status", {}).get("phase") not in TERMINAL_PHASES:
                    self._bind(key, uid, node, pod)
            elif pod["spec"].get("schedulerName", SCHEDULER) != SCHEDULER:
                pass  # another scheduler's pod: it binds it, as kube-scheduler leaves it
            else:
                self.clock.call_later(self.config.schedule_delay, lambda: self._schedule(key, uid))
            self._on_deleting(key, uid, pod)
        elif event.type == "DELETED":
            self._release(key)
        else:
            terminal = pod.get("status", {}).get("phase") in TERMINAL_PHASES
            if terminal:
                self._release(key)
                # The kubelet's last word on a finished pod being deleted: its delete with
                # grace 0 (finalizers, if any, then hold the object until they are removed).
                deleting = meta.get("deletionTimestamp") and pod["spec"].get("nodeName")
                if deleting and meta.get("deletionGracePeriodSeconds") != 0:
                    self.port.remove(key[0], key[1], uid)
            else:
                node = pod["spec"].get("nodeName")
                if node and key not in self._node_of:
                    self._bind(key, uid, node, pod)  # bound by another scheduler: start it
                self._on_deleting(key, uid, pod)
                if resize_pending(pod):  # pods/resize changed its resources: actuate them
                    self._kubelet_later(
                        RESIZE_LATENCY, lambda: self._update(key, uid, resize_actuated)
                    )

    # -- scheduler -----------------------------------------------------------------------------

    def _fit(self, name: str, pod: Obj | None) -> NodeFit:
        affinity = pod is None or all(allowed(pod, name) for allowed in self.node_filters)
        return NodeFit(
            ready=self._nodes[name],
            affinity=affinity,
            pods=len(self._bound[name]),
            max_pods=self.config.pods_per_node,
            used=self._used.get(name, Request()),
            allocatable=self.config.allocatable,
        )

    def _pick_node(self, pod: Obj | None = None) -> str | None:
        """The node with the fewest pods bound (then the first by name) that the pod fits.

        Nodes are tried in that order and the first that fits wins, which is the same node as
        weighing every one; usually the first fits, so a pod costs one fit check, not one per
        node (weighing all of them was most of kubesim's CPU in a 10,000-pod scale-up)."""
        request = Request() if pod is None else pod_request(pod)
        bound = self._bound
        for name in sorted(self._nodes, key=lambda n: (len(bound[n]), n)):
            reasons, _ = node_reasons(self._fit(name, pod), request)
            if not reasons:
                return name
        return None

    def _why_not(self, pod: Obj) -> str:
        request = pod_request(pod)
        verdicts = [node_reasons(self._fit(name, pod), request) for name in self._nodes]
        return unschedulable_message(verdicts, pod)

    def _schedule(self, key: Key, uid: str) -> None:
        with self._lock:
            pod = self.port.find(*key)
            if pod is None or pod["metadata"].get("uid") != uid:
                return
            if pod["metadata"].get("deletionTimestamp") or pod["spec"].get("nodeName"):
                return
            waiting = next(filter(None, (check(pod) for check in self.schedule_checks)), None)
            node = None if waiting else self._pick_node(pod)
            if node is None:
                self._unschedulable[key] = uid
                msg = waiting or self._why_not(pod)
                said = [
                    c.get("message")
                    for c in pod.get("status", {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"
                ]
                if said != [msg]:
                    self.port.record_event(
                        pod,
                        type_="Warning",
                        reason="FailedScheduling",
                        message=msg,
                        component=SCHEDULER,
                    )
            else:
                self._unschedulable.pop(key, None)
                self._bind_locked(key, node, pod)
        if node is None:

            def unschedulable(p: Obj) -> Obj:
                condition(
                    p.setdefault("status", {}),
                    "PodScheduled",
                    "False",
                    self._now(),
                    reason="Unschedulable",
                    message=msg,
                )
                return p

            self._update(key, uid, unschedulable)
            return
        if self.port.bind(key[0], key[1], uid, node, self._now()) is not None:
            self._plan_start(key, uid)
        else:
            self._release(key)

    def _bind_locked(self, key: Key, node: str, pod: Obj) -> None:
        if key in self._node_of:
            return
        request = pod_request(pod)
        self._node_of[key] = node
        self._request_of[key] = request
        self._bound.setdefault(node, set()).add(key)
        self._used[node] = self._used.get(node, Request()) + request

    def _bind(self, key: Key, uid: str, node: str, pod: Obj) -> None:
        with self._lock:
            known = key in self._node_of
            self._bind_locked(key, node, pod)
        if not known:
            self._plan_start(key, uid)

    def _retry_unschedulable(self) -> None:
        with self._lock:
            waiting = list(self._unschedulable.items())
        for key, uid in waiting:
            with self._lock:
                if self._pick_node() is None:
                    return
            self._schedule(key, uid)

    def retry_unschedulable(self) -> None:
        """Give every waiting pod another try soon (something it waited for may exist now)."""
        with self._lock:
            self._retry_unschedulable_soon()

    # -- nodes ---------------------------------------------------------------------------------

    def lose_node(self, node: str) -> list[Obj]:
        """Take a node away: it stops scheduling and every pod bound to it fails (NodeLost)."""
        with self._lock:
            if node not in self._nodes:
                raise KeyError(node)
            self._nodes[node] = False
            keys = sorted(self._bound.get(node, ()))
        if self.on_node_change is not None:
            self.on_node_change(node, False)
        failed = []
        for ns, name in keys:
            pod = self.terminate(
                ns,
                name,
                exit_code=137,
                reason="ContainerStatusUnknown",
                message="The container could not be located when the pod was terminated",
                pod_reason="NodeLost",
                pod_message=f"Node {node} which was running pod {name} is unresponsive",
                force_phase="Failed",
            )
            if pod is not None:
                failed.append(pod)
        return failed

    def restore_node(self, node: str) -> None:
        with self._lock:
            if node not in self._nodes:
                raise KeyError(node)
            self._nodes[node] = True
            self._retry_unschedulable_soon()
        if self.on_node_change is not None:
            self.on_node_change(node, True)

    def add_node(self, name: str | None = None) -> str:
        with self._lock:
            name = name or f"{self.config.node_prefix}{len(self._nodes)}"
            self._nodes[name] = True
            self._bound.setdefault(name, set())
            self._retry_unschedulable_soon()
        if self.on_node_change is not None:
            self.on_node_change(name, True)
        return name

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return [
                NodeInfo(
                    name=n, ready=r, pods=len(self._bound[n]), capacity=self.config.pods_per_node
                )
                for n, r in self._nodes.items()
            ]
