"""A real API server dressed as a deterministic kubesim, so one test runs on both.

:class:`RealCluster` pairs a shared :class:`~.server.RealServer` with a
:class:`~execpods.kubesim.nodesim.NodeSimulator` on a virtual clock for the namespaces a test
uses, and answers the part of :class:`~execpods.kubesim.KubeSim`'s control API that means
something on a real cluster: moving time (the nodes' actions), the kubelet's pause, disruptions
(a kubelet eviction, the Eviction API, the scheduler's preemption and the taint manager's delete,
each as that component writes it), reading pods and objects. kubesim's fault injection has no
counterpart on a real server: those calls raise :class:`NotImplementedError`, and the tests that
need them say so by a marker (see docs/kubesim.md, the fidelity table).

Each :meth:`RealCluster.reset` empties the namespaces of pods (finalizers stripped first),
events and the other kinds kubesim serves, so tests that name ``default`` keep their meaning on a
server they share.
"""

from __future__ import annotations

import ssl
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from execpods.devtools.realserver.server import RealServer
from execpods.kubesim.clock import VirtualClock
from execpods.kubesim.nodes import ClusterConfig, NodeInfo
from execpods.kubesim.nodesim import NodeSimulator
from execpods.kubesim.pods import rfc3339

__all__ = ["RealCluster", "real_cluster"]

_RESET_KINDS = ("events", "configmaps", "secrets", "services", "persistentvolumeclaims")


class RealCluster:
    """The real server plus simulated nodes for ``namespaces``, with kubesim's control names."""

    real = True

    def __init__(self, server: RealServer, nodes: NodeSimulator) -> None:
        self.server = server
        self.nodes = nodes
        self.cluster = nodes.simulation
        parsed = urllib.parse.urlsplit(server.url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 443

    # -- what clients need ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.server.kubeconfig_path

    def ssl_context(self) -> ssl.SSLContext:
        return self.server.ssl_context()

    def request_raw(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One request as the admin (kubesim's tests send plain HTTP; this adds TLS and the
        token): the status and the parsed body."""
        return self.server.request(method, path, body, headers=headers)

    @property
    def resource_version(self) -> str:
        code, listing = self.server.request("GET", "/api/v1/pods?limit=1")
        assert code == 200, listing
        return str(listing["metadata"]["resourceVersion"])

    # -- time and the nodes ---------------------------------------------------------------------

    def now(self) -> float:
        return self.nodes.clock.now()

    def advance(self, seconds: float) -> int:
        return self.nodes.advance(seconds)

    def step(self) -> bool:
        return self.nodes.step()

    def run_until_idle(self, max_seconds: float = 3600.0) -> int:
        return self.nodes.run_until_idle(max_seconds)

    def pause_kubelet(self) -> None:
        self.nodes.sync()
        self.cluster.pause_kubelet()

    def resume_kubelet(self) -> None:
        self.cluster.resume_kubelet()

    def nodes_info(self) -> list[NodeInfo]:
        return self.cluster.nodes()

    # -- pods -----------------------------------------------------------------------------------

    def pod(self, name: str, namespace: str = "default") -> Any:
        return self.server.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def pods(self, namespace: str | None = None) -> list[Any]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        listing: Any = self.server.get(path)
        return list(listing["items"])

    def objects(self, plural: str, namespace: str | None = None) -> list[Any]:
        path = f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"
        listing: Any = self.server.get(path)
        return list(listing["items"])

    def oom_kill(self, name: str, namespace: str = "default") -> Any:
        self.nodes.sync()
        return self.cluster.oom_kill(namespace, name)

    def evict(
        self, name: str, namespace: str = "default", *, message: str = "", cause: str = "Evicted"
    ) -> Any:
        """The disruption ``cause`` as the component behind it does it on a real cluster."""
        self.nodes.sync()
        if cause == "Evicted":
            return self.cluster.evict(namespace, name, message)
        if cause == "EvictionByEvictionAPI":
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
            code, answer = self.server.request("POST", path, body)
            if code != 201:
                raise RuntimeError(f"eviction refused ({code}): {answer}")
            return self.pod(name, namespace)
        reasons = {
            "Preempted": ("PreemptionByScheduler", "Preempted in order to admit critical pod"),
            "DeletionByTaintManager": (
                "DeletionByTaintManager",
                "Taint manager: deleting due to NoExecute taint",
            ),
        }
        if cause not in reasons:
            raise ValueError(f"unknown disruption cause {cause!r}")
        reason, text = reasons[cause]
        uid = self.pod(name, namespace)["metadata"]["uid"]

        def mark(p: dict[str, Any]) -> dict[str, Any]:
            conditions = p["status"].setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": message or text,
                    "lastTransitionTime": rfc3339(time.time()),
                }
            )
            return p

        self.nodes.port.write_status(namespace, name, uid, mark)
        self.server.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return self.pod(name, namespace)

    def __getattr__(self, name: str) -> Any:
        raise NotImplementedError(
            f"{name} is kubesim's fault injection or control: a real API server has none"
        )

    # -- between tests --------------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the namespaces: strip finalizers, delete every pod at once, delete the rest."""
        for ns in self.nodes.namespaces:
            for pod in self.pods(ns):
                if pod["metadata"].get("finalizers"):
                    name = pod["metadata"]["name"]
                    self.server.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/pods/{name}",
                        {"metadata": {"finalizers": None}},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
            self.server.request(
                "DELETE", f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0}
            )
            for plural in _RESET_KINDS:
                self.server.request("DELETE", f"/api/v1/namespaces/{ns}/{plural}")
        deadline = time.monotonic() + 30
        while any(self.pods(ns) for ns in self.nodes.namespaces):
            if time.monotonic() > deadline:
                raise TimeoutError("pods left after the reset")
            time.sleep(0.01)


_MADE: set[tuple[str, str]] = set()


def ensure_namespace(server: RealServer, name: str) -> None:
    """Create the namespace if missing and wait for its default ServiceAccount (the controller
    manager's), without which the ServiceAccount admission refuses pods."""
    if (server.url, name) in _MADE:
        return
    server.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while server.get(f"/api/v1/namespaces/{name}/serviceaccounts/default") is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {name}")
        time.sleep(0.05)
    _MADE.add((server.url, name))


@contextmanager
def real_cluster(
    server: RealServer, config: ClusterConfig, namespaces: tuple[str, ...] = ("default",)
) -> Iterator[RealCluster]:
    """Simulated nodes on a virtual clock for ``namespaces`` of ``server``; the namespaces are
    made if missing and emptied before and after."""
    for ns in namespaces:
        ensure_namespace(server, ns)
    nodes = NodeSimulator(
        url=server.url,
        token=server.token,
        ca_file=str(server.ca_path),
        namespaces=namespaces,
        config=config,
        clock=VirtualClock(start=time.time()),
        keep_nodes=True,  # the next test registers the same nodes again
    )
    cluster = RealCluster(server, nodes)
    cluster.reset()  # before, not after: the next test's reset empties what this one left
    with nodes:
        yield cluster
