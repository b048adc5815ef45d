"""The typed in-process control API: :class:`KubeSim`.

Tests start a simulator with ``with KubeSim(deterministic=True) as sim:``; it serves real HTTP on a
free loopback port, writes a kubeconfig, and on exit ends every connection and joins every thread.

This module builds the simulator and owns its lifecycle, its clock and what it reports; the
scripting verbs :class:`KubeSim` inherits live in :mod:`execpods.kubesim.podcontrols` (pods and
nodes) and :mod:`execpods.kubesim.faultcontrols` (faults and RBAC).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from execpods.kubesim.affinity import fits_node
from execpods.kubesim.apf import ApfConfig, FairQueues
from execpods.kubesim.applykinds import APPLY_KINDS, NamespaceApi
from execpods.kubesim.claims import ClaimBinding
from execpods.kubesim.clock import Clock, RealClock, Timer, VirtualClock
from execpods.kubesim.cluster import Cluster, ClusterConfig
from execpods.kubesim.control import make_control
from execpods.kubesim.faultcontrols import FaultControls
from execpods.kubesim.faults import Faults, RequestLog, RequestRecord
from execpods.kubesim.limits import CreateRateLimit
from execpods.kubesim.mounts import served_mounts
from execpods.kubesim.objects import KINDS, GarbageCollector, ObjectApi
from execpods.kubesim.podcontrols import PodControls
from execpods.kubesim.pods import rfc3339
from execpods.kubesim.quota import ResourceQuotas
from execpods.kubesim.resources import PodApi
from execpods.kubesim.server import ApiServer, ServerContext
from execpods.kubesim.store import PodStore, SavedState

__all__ = ["KubeSim"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backup:
    """The state of every store at one moment (`KubeSim.backup`)."""

    pods: SavedState
    objects: Mapping[str, SavedState]


class KubeSim(PodControls, FaultControls):
    """An embedded Kubernetes API server for core/v1 pods over a simulated cluster.

    ``deterministic=True`` uses a virtual clock: nothing happens in the cluster until the caller
    advances time (:meth:`advance`, :meth:`step`, :meth:`run_until_idle`). Otherwise one
    background thread runs the cluster on wall-clock time.

    As in a cluster, a namespace exists once created: ``default``, ``kube-system``,
    ``kube-public`` and ``kube-node-lease`` from the start, ``namespaces`` too, any other by
    :meth:`create_namespace` or a create over the API.
    """

    def __init__(
        self,
        *,
        cluster: ClusterConfig | None = None,
        deterministic: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        event_window: int = 10_000,
        bookmark_interval: float = 30.0,
        kubeconfig_path: str | Path | None = None,
        websocket_watch: bool = True,
        fresh_timeout: float = 3.0,
        rbac: Iterable[Mapping[str, object]] | None = None,
        apf: ApfConfig | None = None,
        namespaces: Iterable[str] = (),
    ) -> None:
        self.config = cluster or ClusterConfig()
        #: API Priority and Fairness: seats and per-flow queues (off unless ``apf`` has seats).
        self.apf = FairQueues(apf)
        self.deterministic = deterministic
        self.clock: Clock = VirtualClock() if deterministic else RealClock()
        self.store = PodStore(event_window=event_window)
        self.cluster = Cluster(self.store, self.clock, self.config)
        self.faults = Faults(self.clock)
        self.log = RequestLog(clock=self.clock)
        self.create_limit = CreateRateLimit(
            self.clock, self.config.create_rate, self.config.create_burst
        )
        self.api = PodApi(
            store=self.store,
            cluster=self.cluster,
            faults=self.faults,
            log=self.log,
            create_limit=self.create_limit,
        )
        self.api.fresh_timeout = fresh_timeout
        self.object_apis = {
            k.plural: ObjectApi(
                kind=k, cluster=self.cluster, log=self.log, event_window=event_window
            )
            for k in (*KINDS, *APPLY_KINDS)
        }
        events = self.object_apis["events"]
        self.cluster.store_port.events = events.create
        self.cluster.mounts = served_mounts(
            objects=self.object_apis, now=lambda: rfc3339(self.clock.now())
        )
        #: Namespaces: the default ones, ``namespaces``, and those created since.
        self.namespaces = NamespaceApi(self.clock)
        for name in namespaces:
            self.create_namespace(name)
        self._gc = GarbageCollector(
            pods=self.store, cluster=self.cluster, objects=list(self.object_apis.values())
        )
        #: Claims' phases and pods waiting for their claims (`claims.py`).
        self.claim_binding = ClaimBinding(
            claims=self.object_apis["persistentvolumeclaims"], pods=self.store, cluster=self.cluster
        )
        #: ResourceQuota objects' usage, and their admission on every pod create (`quota.py`).
        self.quotas = ResourceQuotas(quotas=self.object_apis["resourcequotas"], pods=self.store)
        self.api.admission = self.quotas.admission
        self.cluster.node_filters.append(fits_node)
        self._websocket_watch = websocket_watch
        if rbac is not None:
            self.enable_rbac(rbac)
        self._host = host
        self._port = port
        self._lifecycle = threading.RLock()
        self._dropper: Timer | None = None
        #: How many times :meth:`restart` brought the server back.
        self.restarts = 0
        self._bookmark_interval = bookmark_interval
        self._kubeconfig: Path | None = Path(kubeconfig_path) if kubeconfig_path else None
        self._tempdir: str | None = None
        self._server: ApiServer | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> KubeSim:
        """Bind, start serving and write the kubeconfig; returns self."""
        with self._lifecycle:
            if self._server is not None:
                return self
            self._server = self._serve(self._port)
        self.clock.start()
        if self._kubeconfig is None:
            self._tempdir = tempfile.mkdtemp(prefix="kubesim-")
            self._kubeconfig = Path(self._tempdir) / "kubeconfig"
        self.write_kubeconfig(self._kubeconfig)
        _log.info("kubesim serving at %s", self.url)
        return self

    def _serve(self, port: int) -> ApiServer:
        context = ServerContext(
            api=self.api,
            control=make_control(self),
            bookmark_interval=self._bookmark_interval,
            objects=self.object_apis,
            websocket_watch=self._websocket_watch,
            apf=self.apf,
            namespaces=self.namespaces,
        )
        server = ApiServer(self._host, port, context)
        server.start()
        return server

    def restart(self, *, down_seconds: float = 0.0, forget_events: bool = True) -> None:
        """Restart the API server with the cluster's state kept, as a control-plane restart does.

        Every connection is cut (watches abruptly, mid-stream), the listener is closed for
        ``down_seconds`` (connections are refused meanwhile) and then serves again on the same
        port. ``forget_events`` (the default) drops the event window, as a restarted server's
        watch cache starts from a fresh list: a watch resumed from an earlier resourceVersion
        gets 410 Expired, and the client must re-list. Pods, resourceVersions, nodes and timers
        carry on unchanged.
        """
        with self._lifecycle:
            server = self._running()
            port = server.port
            self.store.close_watchers(abrupt=True)
            server.close()
            if forget_events:
                self.store.compact()
            if down_seconds > 0:
                time.sleep(down_seconds)
            self._server = self._serve(port)
            self.restarts += 1
        _log.info("kubesim restarted at %s", self.url)

    def backup(self) -> Backup:
        """Every object and resourceVersion now, as an etcd backup holds them (`restore`)."""
        with self._lifecycle:
            return Backup(
                pods=self.store.saved(),
                objects={plural: api.store.saved() for plural, api in self.object_apis.items()},
            )

    def restore(self, backup: Backup, *, down_seconds: float = 0.0) -> None:
        """Restart the API server with its state restored from `backup`, as after an etcd
        restore: objects made since are gone, deleted ones are back, resourceVersions go back to
        the backup's (lower than any a client saw since), watch history is gone and every
        connection is cut. The simulated scheduler and kubelets re-list, as their informers would:
        pods that are gone are forgotten, and pods that are back are scheduled or run again."""
        with self._lifecycle:
            server = self._running()
            port = server.port
            server.close()
            self.store.restore(backup.pods)
            for plural, saved in backup.objects.items():
                self.object_apis[plural].store.restore(saved)
            self.cluster.resync(backup.pods.objects.values())
            if down_seconds > 0:
                time.sleep(down_seconds)
            self._server = self._serve(port)
            self.restarts += 1
        _log.info("kubesim restored from a backup at %s", self.url)

    def close(self) -> None:
        """Stop serving, end every connection and thread, and remove the temporary kubeconfig."""
        with self._lifecycle:
            server, self._server = self._server, None
            self._stop_dropping()
        if server is not None:
            server.close()
        self.clock.stop()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None
            self._kubeconfig = None

    def __enter__(self) -> KubeSim:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _running(self) -> ApiServer:
        if self._server is None:
            raise RuntimeError("the simulator is not running; use start() or a with block")
        return self._server

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._running().port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        if self._kubeconfig is None:
            raise RuntimeError("the simulator is not running")
        return self._kubeconfig

    def write_kubeconfig(
        self, path: str | Path, *, namespace: str = "default", token: str | None = None
    ) -> Path:
        """Write a kubeconfig (context ``kubesim``) pointing at this server, with a bearer
        ``token`` (default: the admin token, which RBAC never refuses)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: kubesim\n"
            "  cluster:\n"
            f"    server: {self.url}\n"
            "contexts:\n"
            "- name: kubesim\n"
            "  context:\n"
            "    cluster: kubesim\n"
            "    user: kubesim\n"
            f"    namespace: {namespace}\n"
            "current-context: kubesim\n"
            "preferences: {}\n"
            "users:\n"
            "- name: kubesim\n"
            "  user:\n"
            f"    token: {token or self.admin_token}\n",
            encoding="utf-8",
        )
        return target

    # -- time ----------------------------------------------------------------------------------

    def now(self) -> float:
        return self.clock.now()

    def _virtual(self) -> VirtualClock:
        if not isinstance(self.clock, VirtualClock):
            raise RuntimeError("time can only be moved in deterministic mode")
        return self.clock

    def advance(self, seconds: float) -> int:
        """Move the virtual clock forward, running due cluster actions; returns how many ran."""
        return self._virtual().advance(seconds)

    def step(self) -> bool:
        """Run the next cluster action (and any due at the same instant); False if none."""
        return self._virtual().step()

    def run_until_idle(self, max_seconds: float = 3600.0) -> int:
        """Run cluster actions until none is pending (at most ``max_seconds`` of virtual time)."""
        return self._virtual().run_until_idle(max_seconds)

    # -- observation ---------------------------------------------------------------------------

    def requests(self) -> list[RequestRecord]:
        """The API requests served so far (not control calls), oldest first."""
        return self.log.records()

    def set_usage(
        self,
        name: str,
        container: str = "spark-kubernetes-executor",
        namespace: str = "default",
        *,
        memory: str | None = None,
        cpu: str | None = None,
    ) -> None:
        """What the metrics API (`metrics.k8s.io`, `kubectl top`) reports the container uses."""
        self.api.usage.set(namespace, name, container, memory=memory, cpu=cpu)

    def keep_request_bodies(self, keep: bool = True) -> None:
        """Keep each later request's body in its record (`RequestRecord.body`): what a client
        wrote, for comparing two clients call by call. Off by default."""
        self.log.keep_bodies = keep

    def request_counts(self) -> dict[str, int]:
        """API requests per verb: get, list, watch, create, update, patch, delete, ..."""
        return self.log.counts()

    def peak_request_rate(self, window: float = 1.0, verbs: Collection[str] | None = None) -> float:
        """The highest rate of API requests (of ``verbs``: "create", "list"...; default all)
        over any ``window`` seconds of clock time since the log was last cleared."""
        return self.log.peak_rate(window, verbs)

    def clear_requests(self) -> None:
        self.log.clear()

    def watch_count(self) -> int:
        return self.store.watcher_count()

    def wait_for_watchers(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` watches are open: start a watch, then act, without a race."""
        return self.store.wait_for_watchers(count, timeout)

    def connection_count(self) -> int:
        return self._running().connection_count()

    def state(self) -> dict[str, object]:
        """A summary for the control endpoint and for debugging."""
        return {
            "url": self.url,
            "now": self.now(),
            "deterministic": self.deterministic,
            "resourceVersion": self.resource_version,
            "pods": len(self.store),
            "watches": self.watch_count(),
            "waitingForFreshness": self.store.freshness_waiters(),
            "kubeletPaused": self.cluster.paused,
            "restarts": self.restarts,
            "rbac": self.api.authorizer.enabled,
            "failures": {"rate": self.config.failure_rate, "after": self.config.failure_after},
            "startLatency": {
                "mean": self.config.start_latency,
                "spread": self.config.start_jitter,
                "distribution": self.config.start_distribution,
            },
            "createRate": self.create_limit.state(),
            "apf": self.apf.state(),
            "pendingTimers": self.clock.pending(),
            "nodes": [dataclasses.asdict(n) for n in self.nodes()],
        }
