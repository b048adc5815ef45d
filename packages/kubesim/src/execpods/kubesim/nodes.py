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
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from execpods.kubesim.clock import Clock
from execpods.kubesim.fit import (
    NodeFit,
    Request,
    node_reasons,
    pod_request,
    quantity_request,
    unschedulable_message,
)
from execpods.kubesim.limits import Distribution, check_latency, sample_latency
from execpods.kubesim.pods import TERMINAL_PHASES, rfc3339
from execpods.kubesim.podstatus import (
    Termination,
    condition,
    container_creating,
    image_pull_backoff,
    image_pull_failed,
    resize_actuated,
    resize_pending,
    running,
    terminated,
)
from execpods.kubesim.store import Event, Obj

RESIZE_LATENCY = 0.1
"""Seconds the kubelet takes to actuate an in-place resize (pods/resize)."""

__all__ = [
    "ANNOTATION_PREFIX",
    "ClusterConfig",
    "NodeInfo",
    "NodeSimulation",
    "PodPort",
    "restart_backoff",
]

_log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "kubesim.execpods.io/"
SCHEDULER = "default-scheduler"
KUBELET = "kubelet"

Key = tuple[str, str]


def restart_backoff(attempt: int) -> float:
    """The kubelet's back-off before restart or pull ``attempt`` (1-based): 10 s doubling to
    300 s, as its ``MaxContainerBackOff``."""
    return float(min(10.0 * 2 ** max(0, attempt - 1), 300.0))


def _go_duration(seconds: float) -> str:
    """A whole number of seconds as Go's ``time.Duration`` prints it (``10s``, ``5m0s``)."""
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """The shape and timing of the simulated cluster.

    Latencies are in seconds of clock time. ``start_latency`` is the mean time from binding to
    Running and ``start_jitter`` its spread, drawn from ``start_distribution``: ``uniform``
    (within mean +/- spread), ``fixed`` (always the mean), ``normal`` (standard deviation
    spread, cut at 0) or ``lognormal`` (that mean and standard deviation, a long right tail).
    ``stop_latency`` is how long the kubelet takes to stop containers on graceful deletion
    (capped by the grace period).

    ``node_cpu`` and ``node_memory`` are each node's allocatable (quantities such as ``"4"``
    and ``"16Gi"``); left None, requests are not counted and only ``pods_per_node`` limits a
    node, as in earlier kubesim versions.

    ``create_rate`` caps pod creates per second of clock time (0: no cap), with ``create_burst``
    at once (0: one second's worth); creates beyond it get 429 with ``Retry-After``, as API
    Priority and Fairness answers an overloaded API server's clients (kubesim only).
    """

    nodes: int = 3
    pods_per_node: int = 110
    node_cpu: str | None = None
    node_memory: str | None = None
    schedule_delay: float = 0.0
    start_latency: float = 1.0
    start_jitter: float = 0.5
    start_distribution: Distribution = "uniform"
    stop_latency: float = 0.5
    seed: int = 0
    failure_rate: float = 0.0
    failure_after: float = 10.0
    image_pull_failures: tuple[str, ...] = ()
    node_prefix: str = "kubesim-node-"
    create_rate: float = 0.0
    create_burst: int = 0

    def __post_init__(self) -> None:
        check_latency(self.start_distribution, self.start_latency, self.start_jitter)
        if not math.isfinite(self.create_rate) or self.create_rate < 0 or self.create_burst < 0:
            raise ValueError("create_rate and create_burst must be >= 0")
        if not 0.0 <= self.failure_rate <= 1.0 or not self.failure_after >= 0:
            raise ValueError("failure_rate must be within [0, 1] and failure_after >= 0")
        quantity_request(self.node_cpu, self.node_memory)  # raises ValueError when malformed

    @property
    def allocatable(self) -> Request | None:
        return quantity_request(self.node_cpu, self.node_memory)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """A node as the tests see it: its name, whether it is up, and how many pods it runs."""

    name: str
    ready: bool
    pods: int
    capacity: int


class PodPort(Protocol):
    """What the nodes need of an API server. Each write names the pod's uid: a pod deleted and
    recreated under the same name must not receive the old pod's change."""

    def find(self, namespace: str, name: str) -> Obj | None:
        """The pod as last seen (kubesim: the store; over HTTP: the watch's cache)."""
        ...

    def write_status(
        self, namespace: str, name: str, uid: str, mutate: Callable[[Obj], Obj | None]
    ) -> Obj | None:
        """Apply ``mutate`` to a fresh copy and write its status; None if the pod is gone,
        another pod, or ``mutate`` declined."""
        ...

    def bind(self, namespace: str, name: str, uid: str, node: str, now: str) -> Obj | None:
        """Bind the pod to ``node`` (spec.nodeName and PodScheduled=True), or None."""
        ...

    def remove(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's last word on a finished pod being deleted: delete it, grace 0."""
        ...

    def record_event(
        self, pod: Obj, *, type_: str, reason: str, message: str, component: str
    ) -> None:
        """Record a core/v1 Event about the pod (best effort)."""
        ...


class NodeSimulation:
    """Scheduler and kubelet simulation, reacting to pod events (:meth:`on_event`)."""

    def __init__(self, port: PodPort, clock: Clock, config: ClusterConfig) -> None:
        self.port = port
        self.clock = clock
        self.config = config
        self.rng = random.Random(config.seed)
        self._lock = threading.RLock()
        self._nodes: dict[str, bool] = {
            f"{config.node_prefix}{i}": True for i in range(config.nodes)
        }
        self._bound: dict[str, set[Key]] = {n: set() for n in self._nodes}
        self._node_of: dict[Key, str] = {}
        self._request_of: dict[Key, Request] = {}
        self._used: dict[str, Request] = {}
        self._unschedulable: dict[Key, str] = {}
        self._stopping: dict[Key, int] = {}
        self._paused = False
        self._deferred: list[Callable[[], object]] = []
        self._ip = 0
        #: Why a pod cannot be scheduled yet (a claim it names does not exist), or None: kubesim's
        #: volume binding registers one (`claims.py`).
        self.schedule_checks: list[Callable[[Obj], str | None]] = []
        #: Whether a pod may go to a node (required node affinity, `affinity.py`).
        self.node_filters: list[Callable[[Obj, str], bool]] = []
        #: Why a bound pod cannot start yet (a volume it mounts is missing) and how long until
        #: the kubelet tries again, or None (kubesim's mounts register one, `mounts.py`).
        self.start_checks: list[Callable[[Obj], float | None]] = []
        #: Nodes whose kubelet fails every pod it starts (exit code 1): a bad node.
        self.crashing_nodes: set[str] = set()
        #: Called when a node is added, lost or restored (nodesim mirrors nodes into the API).
        self.on_node_change: Callable[[str, bool], None] | None = None

    # -- helpers -------------------------------------------------------------------------------

    def _now(self) -> str:
        return rfc3339(self.clock.now())

    def kubelet_later(self, delay: float, action: Callable[[], object]) -> None:
        """Schedule a kubelet action (a resize's actuation); held back while it is paused."""
        self._kubelet_later(delay, action)

    def _kubelet_later(self, delay: float, action: Callable[[], object]) -> None:
        """Schedule a kubelet action; while the kubelet is paused it is held back."""

        def run() -> None:
            with self._lock:
                if self._paused:
                    self._deferred.append(action)
                    return
            action()

        self.clock.call_later(delay, run)

    def _update(self, key: Key, uid: str, mutate: Callable[[Obj], Obj | None]) -> Obj | None:
        return self.port.write_status(key[0], key[1], uid, mutate)

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

    def _on_deleting(self, key: Key, uid: str, pod: Obj) -> None:
        """A graceful delete reached the kubelet: stop the containers after the grace period
        (capped by ``stop_latency``); a shorter grace on a second delete stops them sooner."""
        meta = pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if not meta.get("deletionTimestamp") or grace is None or not pod["spec"].get("nodeName"):
            return
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return
        with self._lock:
            seen = self._stopping.get(key)
            if seen is not None and seen <= grace:
                return
            self._stopping[key] = int(grace)
        stop = min(float(grace), self.config.stop_latency)
        killed = self.config.stop_latency > grace
        self._kubelet_later(stop, lambda: self._finish_graceful(key, uid, killed=killed))

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

    # -- kubelet -------------------------------------------------------------------------------

    def _plan_start(self, key: Key, uid: str, delay: float | None = None) -> None:
        if delay is None:
            c = self.config
            delay = sample_latency(self.rng, c.start_distribution, c.start_latency, c.start_jitter)
        self._kubelet_later(delay, lambda: self._start(key, uid))

    def _container_id(self) -> str:
        return f"containerd://{self.rng.getrandbits(64):016x}"

    def _node_up(self, pod: Obj) -> bool:
        node = pod["spec"].get("nodeName")
        return bool(node) and self._nodes.get(node, False)

    def _pull_fails(self, pod: Obj) -> list[str]:
        annotations = pod["metadata"].get("annotations") or {}
        images = [c.get("image") or "" for c in pod["spec"]["containers"]]
        if annotations.get(ANNOTATION_PREFIX + "image-pull-failure") == "true":
            return images
        return [i for i in images if i in self.config.image_pull_failures]

    def _start(self, key: Key, uid: str, pulls: int = 0) -> None:
        pod = self.port.find(*key)
        if pod is None or pod["metadata"].get("uid") != uid or not self._node_up(pod):
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return
        retry = next(filter(None, (check(pod) for check in self.start_checks)), None)
        if retry is not None:
            if not pod.get("status", {}).get("containerStatuses"):
                self._update(key, uid, lambda p: container_creating(p, self._now()))
            self._plan_start(key, uid, delay=retry)
            return
        if failed := self._pull_fails(pod):
            self._image_pull_failed(key, uid, pod, failed, pulls + 1)
            return
        if pod["spec"].get("nodeName") in self.crashing_nodes:
            message = "the node's kubelet fails every pod (kubesim bad node)"
            self.terminate(*key, exit_code=1, reason="Error", message=message, uid=uid)
            return
        with self._lock:
            self._ip += 1
            ip = f"10.244.{(self._ip >> 8) & 255}.{self._ip & 255}"
        if (
            self._update(key, uid, lambda p: running(p, self._now(), ip, self._container_id))
            is None
        ):
            return
        self._plan_exit(key, uid, pod["metadata"].get("annotations") or {})

    def _image_pull_failed(
        self, key: Key, uid: str, pod: Obj, images: list[str], attempt: int
    ) -> None:
        """ErrImagePull now; ImagePullBackOff a moment later; a new pull after the back-off."""
        if self._update(key, uid, lambda p: image_pull_failed(p, self._now(), images)) is None:
            return
        for image in images:
            self.port.record_event(
                pod,
                type_="Warning",
                reason="Failed",
                message=f'Failed to pull image "{image}": not found',
                component=KUBELET,
            )

        def back_off() -> None:
            if self._update(key, uid, lambda p: image_pull_backoff(p, images)) is None:
                return
            for image in images:
                self.port.record_event(
                    pod,
                    type_="Normal",
                    reason="BackOff",
                    message=f'Back-off pulling image "{image}"',
                    component=KUBELET,
                )

        self._kubelet_later(1.0, back_off)
        self._kubelet_later(restart_backoff(attempt), lambda: self._start(key, uid, pulls=attempt))

    def _plan_exit(self, key: Key, uid: str, annotations: dict[str, str]) -> None:
        def number(name: str) -> float | None:
            try:
                return float(annotations[ANNOTATION_PREFIX + name])
            except (KeyError, ValueError):
                return None

        oom_after = number("oom-after")
        exit_after = number("exit-after")
        if oom_after is not None:
            self._kubelet_later(oom_after, lambda: self.oom_kill(*key, uid=uid))
        elif exit_after is not None:
            code = int(number("exit-code") or 0)
            reason = "Completed" if code == 0 else "Error"
            self._kubelet_later(
                exit_after, lambda: self.terminate(*key, exit_code=code, reason=reason, uid=uid)
            )
        elif self.config.failure_rate > 0 and self.rng.random() < self.config.failure_rate:
            mean = self.config.failure_after
            after = self.rng.expovariate(1.0 / mean) if mean > 0 else 0.0  # 0: as they start
            self._kubelet_later(
                after,
                lambda: self.terminate(
                    *key, exit_code=1, reason="Error", message="random failure", uid=uid
                ),
            )

    # -- terminations (also the control API) ---------------------------------------------------

    def terminate(
        self,
        namespace: str,
        name: str,
        *,
        exit_code: int,
        reason: str,
        message: str = "",
        uid: str | None = None,
        pod_reason: str | None = None,
        pod_message: str | None = None,
        force_phase: str | None = None,
        disruption: tuple[str, str] | None = None,
    ) -> Obj | None:
        """End the pod's containers with ``exit_code``; the restart policy decides what follows.

        With ``force_phase`` (eviction, node loss, graceful deletion) no restart happens;
        ``disruption`` (reason, message) also sets the ``DisruptionTarget`` condition.
        """
        pod = self.port.find(namespace, name)
        if pod is None or (uid is not None and pod["metadata"].get("uid") != uid):
            return None
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return pod
        policy = pod["spec"].get("restartPolicy", "Always")
        restart = force_phase is None and (
            policy == "Always" or (policy == "OnFailure" and exit_code != 0)
        )
        if pod["metadata"].get("deletionTimestamp"):
            restart = False
        key: Key = (namespace, name)
        puid: str = pod["metadata"]["uid"]
        restarts = 1 + max(
            (
                c.get("restartCount", 0)
                for c in pod.get("status", {}).get("containerStatuses") or []
            ),
            default=0,
        )
        end = Termination(
            exit_code=exit_code,
            reason=reason,
            message=message,
            restart=restart,
            force_phase=force_phase,
            pod_reason=pod_reason,
            pod_message=pod_message,
            backoff_message=(
                f"back-off {_go_duration(restart_backoff(restarts))} restarting failed "
                f"container={{container}} pod={name}_{namespace}({puid})"
            ),
        )

        def mutate(p: Obj) -> Obj:
            if disruption is not None:
                condition(
                    p.setdefault("status", {}),
                    "DisruptionTarget",
                    "True",
                    self._now(),
                    reason=disruption[0],
                    message=disruption[1],
                )
            return terminated(p, self._now(), end)

        result = self._update(key, puid, mutate)
        if result is not None and restart:
            self._plan_start(key, puid, delay=restart_backoff(restarts))
        return result

    def oom_kill(self, namespace: str, name: str, *, uid: str | None = None) -> Obj | None:
        return self.terminate(namespace, name, exit_code=137, reason="OOMKilled", uid=uid)

    def evict(self, namespace: str, name: str, message: str = "") -> Obj | None:
        """The kubelet's node-pressure eviction: DisruptionTarget (TerminationByKubelet), the
        containers killed (137), phase Failed with reason Evicted."""
        text = message or "The node was low on resource: memory."
        return self.terminate(
            namespace,
            name,
            exit_code=137,
            reason="Error",
            pod_reason="Evicted",
            pod_message=text,
            force_phase="Failed",
            disruption=("TerminationByKubelet", text),
        )

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

    # -- kubelet pause -------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self._paused

    def pause_kubelet(self) -> None:
        with self._lock:
            self._paused = True

    def resume_kubelet(self) -> None:
        """Resume the kubelet; actions held back while paused run now (as clock timers)."""
        with self._lock:
            self._paused = False
            deferred, self._deferred = self._deferred, []
        for action in deferred:
            self._kubelet_later(0.0, action)

    def _finish_graceful(self, key: Key, uid: str, *, killed: bool = False) -> None:
        """The containers stop: on SIGTERM (exit 143) within the grace period, or, when they
        would outlive it (``stop_latency`` > grace), by the kubelet's SIGKILL at its end (137)."""
        self.terminate(
            *key,
            exit_code=137 if killed else 143,
            reason="Error",
            message=(
                "killed by the kubelet at the end of the grace period"
                if killed
                else "terminated by the kubelet for graceful deletion"
            ),
            uid=uid,
            force_phase="Failed",
        )
