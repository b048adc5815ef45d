"""Scripting the simulated cluster's pods and nodes in process: :class:`PodControls`.

Split out of :mod:`execpods.kubesim.api` when that module had grown past 600 lines. These are
the verbs a test uses to set up pods and namespaces and to make things happen to them (crashes,
evictions, node loss, start latency); :class:`~execpods.kubesim.api.KubeSim` inherits them and
builds the state they act on, declared here so the checker sees what they use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from execpods.kubesim.applykinds import NamespaceApi, namespace_not_found
from execpods.kubesim.bodies import JsonObject, Pod, as_pod
from execpods.kubesim.cluster import Cluster, ClusterConfig, NodeInfo
from execpods.kubesim.disruptions import disrupt
from execpods.kubesim.errors import ApiError
from execpods.kubesim.limits import CreateRateLimit, Distribution, check_latency
from execpods.kubesim.objects import ObjectApi
from execpods.kubesim.resources import PodApi
from execpods.kubesim.store import Obj, PodStore, copy_obj

__all__ = ["PodControls"]


class PodControls:
    """`KubeSim`'s pods and nodes: in-process creates, reads and cluster events."""

    config: ClusterConfig
    store: PodStore
    cluster: Cluster
    create_limit: CreateRateLimit
    api: PodApi
    object_apis: dict[str, ObjectApi]
    namespaces: NamespaceApi

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
