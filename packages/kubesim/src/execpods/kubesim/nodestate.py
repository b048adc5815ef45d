"""The node simulation's shared ground: its configuration, its port to the API server, and the
state its scheduler and kubelets share.

Split out of :mod:`execpods.kubesim.nodes` when that module had grown to 735 lines: the
scheduler (``nodes.py``) and the kubelet (``kubelet.py``) both build on :class:`NodeState`, and
what callers configure (:class:`ClusterConfig`) and implement (:class:`PodPort`) reads best on
its own. :mod:`execpods.kubesim.nodes` re-exports the public names.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from execpods.kubesim.clock import Clock
from execpods.kubesim.fit import Request, quantity_request
from execpods.kubesim.limits import Distribution, check_latency
from execpods.kubesim.pods import rfc3339
from execpods.kubesim.store import Obj

__all__ = [
    "ANNOTATION_PREFIX",
    "KUBELET",
    "SCHEDULER",
    "ClusterConfig",
    "Key",
    "NodeInfo",
    "NodeState",
    "PodPort",
    "go_duration",
    "restart_backoff",
]

ANNOTATION_PREFIX = "kubesim.execpods.io/"
SCHEDULER = "default-scheduler"
KUBELET = "kubelet"

Key = tuple[str, str]


def restart_backoff(attempt: int) -> float:
    """The kubelet's back-off before restart or pull ``attempt`` (1-based): 10 s doubling to
    300 s, as its ``MaxContainerBackOff``."""
    return float(min(10.0 * 2 ** max(0, attempt - 1), 300.0))


def go_duration(seconds: float) -> str:
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


class NodeState:
    """The state the scheduler and the kubelets share, and the kubelet's clock (its timers
    and its pause); :class:`~execpods.kubesim.nodes.NodeSimulation` adds the behaviour."""

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
