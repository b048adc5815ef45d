"""The typed in-process control API: :class:`KubeSim`.

Tests start a simulator with ``with KubeSim(deterministic=True) as sim:``; it serves real HTTP on a
free loopback port, writes a kubeconfig, and on exit ends every connection and joins every thread.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from execpods.kubesim.affinity import fits_node
from execpods.kubesim.apf import ApfConfig, FairQueues
from execpods.kubesim.applykinds import APPLY_KINDS, NamespaceApi, namespace_not_found
from execpods.kubesim.bodies import JsonObject, Pod, as_pod
from execpods.kubesim.claims import ClaimBinding
from execpods.kubesim.clock import Clock, RealClock, Timer, VirtualClock
from execpods.kubesim.cluster import Cluster, ClusterConfig, NodeInfo
from execpods.kubesim.control import make_control
from execpods.kubesim.disruptions import disrupt
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import Faults, RequestLog, RequestRecord
from execpods.kubesim.limits import CreateRateLimit, Distribution, check_latency
from execpods.kubesim.mounts import served_mounts
from execpods.kubesim.objects import KINDS, GarbageCollector, ObjectApi
from execpods.kubesim.pods import rfc3339
from execpods.kubesim.quota import ResourceQuotas
from execpods.kubesim.resources import PodApi
from execpods.kubesim.server import ApiServer, ServerContext
from execpods.kubesim.store import Obj, PodStore, SavedState, copy_obj

__all__ = ["KubeSim"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backup:
    """The state of every store at one moment (`KubeSim.backup`)."""

    pods: SavedState
    objects: Mapping[str, SavedState]


class KubeSim:
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

    # -- pods and nodes ------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self.store.resource_version)

    def pods(self, namespace: str | None = None) -> list[Pod]:
        """Copies of the stored pods (all namespaces by default)."""
        items, _ = self.store.list(namespace)
        return [as_pod(copy_obj(p)) for p in items]

    def pod(self, name: str, namespace: str = "default") -> Pod | None:
        obj = self.store.find(namespace, name)
        return None if obj is None else as_pod(copy_obj(obj))

    def objects(self, plural: str, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored ConfigMaps, Services, PersistentVolumeClaims or Secrets."""
        api = self.object_apis.get(plural)
        if api is None:
            raise ValueError(f"kubesim serves no {plural!r}; it serves {sorted(self.object_apis)}")
        items, _ = api.store.list(namespace)
        return [copy_obj(o) for o in items]

    def create_pod(self, body: JsonObject, namespace: str = "default") -> Pod:
        """Create a pod in process, with the same admission as a POST (test set-up: it is not an
        API request, so the create-rate cap does not apply).

        The body is copied first: admission keeps its nested maps in the stored pod, which must
        not change when the caller reuses the body (over HTTP every body is freshly parsed).
        As over HTTP, the namespace must exist (`create_namespace`).
        """
        if not self.namespaces.exists(namespace):
            raise namespace_not_found(namespace)
        return copy_obj(self.api.create(namespace, copy_obj(body), limited=False))

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
        """Create a namespace in process (test set-up, as `kubectl create namespace`); one that
        exists already is left as it is and returned."""
        if self.namespaces.exists(name):
            return self.namespaces.get(name)
        meta: dict[str, object] = {"name": name}
        if labels:
            meta["labels"] = dict(labels)
        return self.namespaces.create({"metadata": meta})

    def delete_pod(
        self, name: str, namespace: str = "default", *, grace_period: int | None = None
    ) -> Pod:
        return self._must(self.cluster.delete(namespace, name, grace_period=grace_period), name)

    def _must(self, pod: Obj | None, name: str) -> Pod:
        if pod is None:
            raise ApiError.not_found(name)
        return as_pod(copy_obj(pod))

    def fail_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        exit_code: int = 1,
        reason: str = "Error",
        message: str = "",
    ) -> Pod:
        """Make the pod's containers exit (a crash); the restart policy decides what follows."""
        pod = self.cluster.terminate(
            namespace, name, exit_code=exit_code, reason=reason, message=message
        )
        return self._must(pod, name)

    def succeed_pod(self, name: str, namespace: str = "default") -> Pod:
        pod = self.cluster.terminate(namespace, name, exit_code=0, reason="Completed")
        return self._must(pod, name)

    def oom_kill(self, name: str, namespace: str = "default") -> Pod:
        """OOMKilled, exit code 137."""
        return self._must(self.cluster.oom_kill(namespace, name), name)

    def evict(
        self, name: str, namespace: str = "default", *, message: str = "", cause: str = "Evicted"
    ) -> Pod:
        """Disrupt the pod as Kubernetes does (see `execpods.kubesim.disruptions`): condition
        ``DisruptionTarget`` with the cause's reason, then ``Evicted`` (the kubelet: the pod
        fails with reason ``Evicted``, whatever its restart policy), or ``Preempted``,
        ``DeletionByTaintManager`` or ``EvictionByEvictionAPI`` (a graceful delete)."""
        return as_pod(copy_obj(disrupt(self.cluster, namespace, name, cause, message)))

    def lose_node(self, node: str) -> list[Pod]:
        """The node goes away; its pods fail with reason ``NodeLost``."""
        return [as_pod(copy_obj(p)) for p in self.cluster.lose_node(node)]

    def restore_node(self, node: str) -> None:
        self.cluster.restore_node(node)

    def add_node(self, name: str | None = None) -> str:
        return self.cluster.add_node(name)

    def nodes(self) -> list[NodeInfo]:
        return self.cluster.nodes()

    def crash_pods_on(self, node: str, *, crashing: bool = True) -> None:
        """Make ``node`` a bad node: every pod its kubelet starts from now on fails at once with
        exit code 1 (``crashing=False`` heals it)."""
        if crashing:
            self.cluster.crashing_nodes.add(node)
        else:
            self.cluster.crashing_nodes.discard(node)

    def pause_kubelet(self) -> None:
        """Hold back every kubelet action (starts, exits, graceful-deletion finishes)."""
        self.cluster.pause_kubelet()

    def resume_kubelet(self) -> None:
        self.cluster.resume_kubelet()

    def set_start_latency(
        self, mean: float, spread: float = 0.0, *, distribution: Distribution = "uniform"
    ) -> None:
        """Change how long containers take to start from now on (pods already waiting keep
        their drawn latency); see :class:`ClusterConfig` for the distributions."""
        check_latency(distribution, mean, spread)
        self.config = dataclasses.replace(
            self.config, start_latency=mean, start_jitter=spread, start_distribution=distribution
        )
        self.cluster.config = self.config

    def set_create_rate(self, per_second: float, *, burst: int = 0) -> None:
        """Cap API pod creates at ``per_second`` (0 lifts the cap), ``burst`` at once (0: one
        second's worth); beyond it creates get 429 with ``Retry-After``. The bucket starts full."""
        self.create_limit.configure(per_second, burst)
        self.config = dataclasses.replace(self.config, create_rate=per_second, create_burst=burst)
        self.cluster.config = self.config

    def compact(self) -> str:
        """Forget the event window: watches and exact lists from older versions get 410."""
        return str(self.store.compact())

    # -- faults --------------------------------------------------------------------------------

    def expire_next(self, count: int = 1, *, seconds: float | None = None) -> None:
        """The next ``count`` list or watch requests get 410 Gone; with ``seconds``, every list
        and watch for that long of clock time (a storm of 410s)."""
        self.faults.expire_next(count, seconds=seconds)

    def expire_watches(self) -> int:
        """Send an ERROR 410 to every open watch and end it (a 410 mid-watch)."""
        return self.store.close_watchers(error=ApiError.gone().status())

    def drop_watches(self, *, abrupt: bool = True) -> int:
        """End every open watch: ``abrupt`` cuts the connection, otherwise the stream ends."""
        return self.store.close_watchers(abrupt=abrupt)

    def fail_requests(
        self, code: int = 503, *, seconds: float | None = None, count: int | None = None
    ) -> None:
        """Answer API requests with 500 or 503 for a period of clock time or a count."""
        self.faults.fail_requests(code, seconds=seconds, count=count)

    def throttle(
        self, count: int = 1, *, retry_after: int = 1, seconds: float | None = None
    ) -> None:
        """Answer the next ``count`` API requests with 429 and ``Retry-After``; with
        ``seconds``, every API request for that long of clock time."""
        self.faults.throttle(count, retry_after=retry_after, seconds=seconds)

    def drop_watches_every(self, seconds: float, *, abrupt: bool = True) -> None:
        """Cut every open watch every ``seconds`` of clock time from now on (0 stops it), as a
        flaky load balancer does. On the virtual clock the drops are timers like the kubelet's,
        so ``run_until_idle`` runs until its ``max_seconds`` while this is on."""
        with self._lifecycle:
            self._stop_dropping()
            if seconds <= 0:
                return

            def tick() -> None:
                self.store.close_watchers(abrupt=abrupt)
                with self._lifecycle:
                    if self._dropper is timer:
                        self._arm_dropper(seconds, tick)

            timer = self._arm_dropper(seconds, tick)

    def _arm_dropper(self, seconds: float, tick: Callable[[], None]) -> Timer:
        self._dropper = self.clock.call_later(seconds, tick)
        return self._dropper

    def _stop_dropping(self) -> None:
        dropper, self._dropper = self._dropper, None
        if dropper is not None:
            dropper.cancel()

    def set_failures(self, rate: float, *, after: float = 10.0) -> None:
        """From now on, a share ``rate`` of the pods that start fail (exit 1) after an
        exponentially distributed run time with mean ``after`` seconds (0: as they start)."""
        self.config = dataclasses.replace(self.config, failure_rate=rate, failure_after=after)
        self.cluster.config = self.config

    def set_latency(self, seconds: float) -> None:
        """Add this much (real) time to every API request."""
        self.faults.set_latency(seconds)

    def reject_creates(self, code: int = 403, *, count: int = 1, message: str = "") -> None:
        """Fail the next ``count`` creates in admission: 403 forbidden or 422 quota exceeded."""
        self.faults.reject_creates(code, count=count, message=message)

    def forbid(self, plural: str, *verbs: str) -> None:
        """Answer `verbs` (get, create, patch) on `plural` (configmaps...) with 403 from now on,
        as when a Role loses them; no verbs: allow all again. Pods have RBAC (`enable_rbac`)."""
        self.object_apis[plural].forbidden = frozenset(verbs)

    def configure_apf(self, config: ApfConfig) -> None:
        """Set API Priority and Fairness: seats, queues, other tenants (``seats=0``: off)."""
        self.apf.configure(config)

    def deny_deletes(
        self,
        labels: Mapping[str, str],
        *,
        code: int = 403,
        message: str = "",
        count: int | None = None,
    ) -> None:
        """Deny deletes of the pods whose labels include ``labels``, as an admission webhook
        (403) or a policy (400, 422) would, until the faults are cleared (or ``count`` times)."""
        self.faults.deny_deletes(labels, code=code, message=message, count=count)

    def clear_faults(self) -> None:
        """Disarm every fault, the periodic watch drops and forbidden verbs included."""
        self.faults.clear()
        for api in self.object_apis.values():
            api.forbidden = frozenset()
        with self._lifecycle:
            self._stop_dropping()

    # -- RBAC ----------------------------------------------------------------------------------

    def enable_rbac(self, manifests: Iterable[Mapping[str, object]]) -> None:
        """Enforce RBAC from these manifests (parsed ServiceAccounts, Roles, ClusterRoles,
        RoleBindings, ClusterRoleBindings, or a List of them), replacing any earlier policy.

        Every API request must then carry a bearer token (:meth:`token_for`); a request no rule
        allows gets kube-apiserver's 403. The admin token (:attr:`admin_token`, in the kubeconfig
        the simulator writes) is never refused; in-process calls are not checked.
        """
        self.api.authorizer.enable(manifests)

    def disable_rbac(self) -> None:
        self.api.authorizer.disable()

    def token_for(self, name: str, namespace: str = "default", *, token: str | None = None) -> str:
        """A bearer token that authenticates as the service account ``namespace/name``
        (``token`` chooses the string, as a CLI or a mounted secret would)."""
        return self.api.authorizer.token_for(namespace, name, token)

    @property
    def admin_token(self) -> str:
        return self.api.authorizer.admin_token

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
