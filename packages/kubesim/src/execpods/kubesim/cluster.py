"""The simulated cluster behind the API: a scheduler, a kubelet per node, and graceful deletion.

Every action is a timer on the clock, so under the virtual clock a test decides exactly when pods
get scheduled, start, crash or finish terminating. Randomness (start latency, random failures,
generated names, uids) comes from one seeded generator so runs are reproducible.

Scenario hooks that any client language can use are pod annotations:
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from execpods.kubesim.clock import Clock
from execpods.kubesim.errors import ApiError
from execpods.kubesim.limits import Distribution, check_latency, sample_latency
from execpods.kubesim.mounts import VolumeMounts
from execpods.kubesim.pods import TERMINAL_PHASES, rfc3339
from execpods.kubesim.podstatus import (
    Termination,
    condition,
    container_creating,
    image_pull_failed,
    running,
    terminated,
)
from execpods.kubesim.store import Event, Obj, PodStore

__all__ = ["ANNOTATION_PREFIX", "Cluster", "ClusterConfig", "NodeInfo"]

_log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "kubesim.execpods.io/"
DEFAULT_SCHEDULER = "default-scheduler"

Key = tuple[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """The shape and timing of the simulated cluster.

    Latencies are in seconds of clock time. ``start_latency`` is the mean time from binding to
    Running and ``start_jitter`` its spread, drawn from ``start_distribution``: ``uniform``
    (within mean +/- spread), ``fixed`` (always the mean), ``normal`` (standard deviation
    spread, cut at 0) or ``lognormal`` (that mean and standard deviation, a long right tail).
    ``stop_latency`` is how long the kubelet takes to stop containers on graceful deletion
    (capped by the grace period).

    ``create_rate`` caps pod creates per second of clock time (0: no cap), with ``create_burst``
    at once (0: one second's worth); creates beyond it get 429 with ``Retry-After``, as API
    Priority and Fairness answers an overloaded API server's clients.
    """

    nodes: int = 3
    pods_per_node: int = 110
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


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """A node as the tests see it: its name, whether it is up, and how many pods it runs."""

    name: str
    ready: bool
    pods: int
    capacity: int


class Cluster:
    """Scheduler and kubelet simulation, reacting to the store's events."""

    def __init__(self, store: PodStore, clock: Clock, config: ClusterConfig) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.rng = random.Random(config.seed)
        self._lock = threading.RLock()
        self._nodes: dict[str, bool] = {
            f"{config.node_prefix}{i}": True for i in range(config.nodes)
        }
        self._bound: dict[str, set[Key]] = {n: set() for n in self._nodes}
        self._node_of: dict[Key, str] = {}
        self._unschedulable: dict[Key, str] = {}
        self._paused = False
        self._deferred: list[Callable[[], object]] = []
        self._ip = 0
        #: The kubelet's Secret and ConfigMap mounts (set by KubeSim, which serves those objects).
        self.mounts: VolumeMounts | None = None
        #: Why a pod cannot be scheduled yet (a claim it names does not exist), or None: kubesim's
        #: volume binding registers one (`claims.py`).
        self.schedule_checks: list[Callable[[Obj], str | None]] = []
        #: Whether a pod may go to a node (required node affinity, `affinity.py`).
        self.node_filters: list[Callable[[Obj, str], bool]] = []
        #: Nodes whose kubelet fails every pod it starts (exit code 1): a bad node.
        self.crashing_nodes: set[str] = set()
        store.add_listener(self._on_event)

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
        """Apply a kubelet change to the pod `uid` only, or do nothing (None).

        The uid is checked inside the store's locked update: a pod deleted and recreated under the
        same name between a check and the write must not receive the old pod's change.
        """
        same_pod = False

        def mutate_if_same_pod(pod: Obj) -> Obj | None:
            nonlocal same_pod
            same_pod = pod["metadata"].get("uid") == uid
            return mutate(pod) if same_pod else None

        try:
            updated = self.store.update(key[0], key[1], mutate_if_same_pod)
        except ApiError:
            return None
        return updated if same_pod else None

    def _release(self, key: Key) -> None:
        with self._lock:
            node = self._node_of.pop(key, None)
            if node is not None:
                self._bound[node].discard(key)
            self._unschedulable.pop(key, None)
            if node is not None:
                self._retry_unschedulable_soon()

    def _retry_unschedulable_soon(self) -> None:
        # Caller holds the lock. Space has freed or a node came: waiting pods get another try.
        if self._unschedulable:
            self.clock.call_later(0.0, self._retry_unschedulable)

    def _on_event(self, event: Event) -> None:
        pod = event.new
        meta = pod["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        uid = meta["uid"]
        if event.type == "ADDED":
            node = pod["spec"].get("nodeName")
            if node:
                self._bind(key, uid, node)
            elif pod["spec"].get("schedulerName", DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
                pass  # another scheduler's pod: it binds it (`bind`), as kube-scheduler leaves it
            else:
                self.clock.call_later(self.config.schedule_delay, lambda: self._schedule(key, uid))
        elif event.type == "DELETED":
            self._release(key)
        else:
            terminal = pod.get("status", {}).get("phase") in TERMINAL_PHASES
            if terminal:
                self._release(key)
            done = (
                terminal
                or not pod["spec"].get("nodeName")
                or meta.get("deletionGracePeriodSeconds") == 0
            )
            if meta.get("deletionTimestamp") and not meta.get("finalizers") and done:
                self.store.remove(key[0], key[1], uid)

    # -- scheduler -----------------------------------------------------------------------------

    def _pick_node(self, pod: Obj | None = None) -> str | None:
        best: tuple[int, str] | None = None
        for name, ready in self._nodes.items():
            used = len(self._bound[name])
            fits = pod is None or all(allowed(pod, name) for allowed in self.node_filters)
            better = best is None or (used, name) < best
            if ready and fits and used < self.config.pods_per_node and better:
                best = (used, name)
        return None if best is None else best[1]

    def _schedule(self, key: Key, uid: str) -> None:
        with self._lock:
            pod = self.store.find(*key)
            if pod is None or pod["metadata"].get("uid") != uid:
                return
            if pod["metadata"].get("deletionTimestamp") or pod["spec"].get("nodeName"):
                return
            waiting = next(filter(None, (check(pod) for check in self.schedule_checks)), None)
            node = None if waiting else self._pick_node(pod)
            if node is None:
                self._unschedulable[key] = uid
                ready = sum(1 for r in self._nodes.values() if r)
                msg = waiting or (
                    f"0/{len(self._nodes)} nodes are available: {ready} Too many pods, "
                    f"{len(self._nodes) - ready} node(s) were unreachable or did not match "
                    "the pod's node affinity."
                )

                def unschedulable(p: Obj) -> Obj:
                    condition(
                        p["status"],
                        "PodScheduled",
                        "False",
                        self._now(),
                        reason="Unschedulable",
                        message=msg,
                    )
                    return p

                self._update(key, uid, unschedulable)
                return
            self._unschedulable.pop(key, None)
            self._bind_locked(key, node)

        def bind(p: Obj) -> Obj:
            p["spec"]["nodeName"] = node
            condition(p["status"], "PodScheduled", "True", self._now())
            return p

        if self._update(key, uid, bind) is not None:
            self._plan_start(key, uid)

    def _bind_locked(self, key: Key, node: str) -> None:
        self._node_of[key] = node
        self._bound.setdefault(node, set()).add(key)

    def _bind(self, key: Key, uid: str, node: str) -> None:
        with self._lock:
            self._bind_locked(key, node)
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

    def bind(self, namespace: str, name: str, node: str) -> None:
        """A Binding (POST pods/NAME/binding): set the node of an unscheduled pod, as another
        scheduler does. 409 when it already has one, as the API server answers."""
        key: Key = (namespace, name)
        pod = self.store.get(namespace, name)
        uid: str = pod["metadata"]["uid"]
        bound = pod["spec"].get("nodeName")
        if bound:
            raise ApiError.conflict(name, f'pod {name} is already assigned to node "{bound}"')

        def assign(p: Obj) -> Obj:
            p["spec"]["nodeName"] = node
            condition(p["status"], "PodScheduled", "True", self._now())
            return p

        if self._update(key, uid, assign) is not None:
            self._bind(key, uid, node)

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

    def _start(self, key: Key, uid: str) -> None:
        pod = self.store.find(*key)
        if pod is None or pod["metadata"].get("uid") != uid or not self._node_up(pod):
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return
        if self.mounts is not None and (problem := self.mounts.problem(pod)) is not None:
            if not pod.get("status", {}).get("containerStatuses"):
                self._update(key, uid, lambda p: container_creating(p, self._now()))
            self._plan_start(key, uid, delay=self.mounts.failed(pod, problem))
            return
        annotations = pod["metadata"].get("annotations") or {}
        images = {c.get("image") for c in pod["spec"]["containers"]}
        if annotations.get(ANNOTATION_PREFIX + "image-pull-failure") == "true" or images & set(
            self.config.image_pull_failures
        ):
            self._update(key, uid, lambda p: image_pull_failed(p, self._now()))
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
        self._plan_exit(key, uid, annotations)

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
    ) -> Obj | None:
        """End the pod's containers with ``exit_code``; the restart policy decides what follows.

        With ``force_phase`` (eviction, node loss, graceful deletion) no restart happens.
        """
        pod = self.store.find(namespace, name)
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

        end = Termination(
            exit_code=exit_code,
            reason=reason,
            message=message,
            restart=restart,
            force_phase=force_phase,
            pod_reason=pod_reason,
            pod_message=pod_message,
        )

        def mutate(p: Obj) -> Obj:
            return terminated(p, self._now(), end)

        result = self._update(key, puid, mutate)
        if result is not None and restart:
            restarts = max(
                (c["restartCount"] for c in result["status"]["containerStatuses"]), default=1
            )
            self._plan_start(key, puid, delay=min(10.0 * 2 ** (restarts - 1), 300.0))
        return result

    def oom_kill(self, namespace: str, name: str, *, uid: str | None = None) -> Obj | None:
        return self.terminate(namespace, name, exit_code=137, reason="OOMKilled", uid=uid)

    def evict(self, namespace: str, name: str, message: str = "") -> Obj | None:
        return self.terminate(
            namespace,
            name,
            exit_code=137,
            reason="Error",
            pod_reason="Evicted",
            pod_message=message or "The node was low on resource: memory.",
            force_phase="Failed",
        )

    def lose_node(self, node: str) -> list[Obj]:
        """Take a node away: it stops scheduling and every pod bound to it fails (NodeLost)."""
        with self._lock:
            if node not in self._nodes:
                raise KeyError(node)
            self._nodes[node] = False
            keys = sorted(self._bound.get(node, ()))
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

    def add_node(self, name: str | None = None) -> str:
        with self._lock:
            name = name or f"{self.config.node_prefix}{len(self._nodes)}"
            self._nodes[name] = True
            self._bound.setdefault(name, set())
            self._retry_unschedulable_soon()
            return name

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

    # -- deletion ------------------------------------------------------------------------------

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
        if immediate and not meta.get("finalizers"):
            removed = self.store.remove(namespace, name, uid)
            if removed is None:
                raise ApiError.not_found(name)
            return removed
        if immediate:
            grace = 0
        now = self.clock.now()

        def mark(p: Obj) -> Obj | None:
            m = p["metadata"]
            current = m.get("deletionGracePeriodSeconds")
            if current is not None and current <= grace:
                return None
            m["deletionTimestamp"] = rfc3339(now + grace)
            m["deletionGracePeriodSeconds"] = grace
            return p

        result = self.store.update(namespace, name, mark)
        if not immediate and result["metadata"].get("deletionGracePeriodSeconds") == grace:
            stop = min(float(grace), self.config.stop_latency)
            killed = self.config.stop_latency > grace
            self._kubelet_later(
                stop, lambda: self._finish_graceful((namespace, name), uid, killed=killed)
            )
        return result

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
