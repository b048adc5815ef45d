"""The sidecar end to end on both servers: kubesim and a real kube-apiserver (``[real]``).

A :class:`Target` is one namespace on one server with simulated nodes behind it, and what a test
needs of it: the sidecar's properties to reach it, the official client, the nodes' control (the
shared node simulation: the same code on both servers) and reads of the app's pods. On the real
server each test gets its own namespace (made with its default ServiceAccount by the controller
manager) and its own nodes, named after it; the server is shared by the session.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from execpods.devtools.realserver.harness import ensure_namespace
from execpods.devtools.realserver.server import USER, RealServer
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.kubesim.nodes import NodeSimulation
from execpods.kubesim.nodesim import NodeSimulator
from execpods.sidecar.embedded import EmbeddedSidecar
from kubernetes import client, config

FAST = ClusterConfig(start_latency=0.15, start_jitter=0.1, stop_latency=0.05, nodes=3)

CoreApi = Any


@dataclass(kw_only=True)
class Target:
    """One namespace on one server, with nodes behind it."""

    kind: str
    namespace: str
    nodes: NodeSimulation
    core: CoreApi
    properties: dict[str, str]
    server: RealServer | None = None

    @property
    def real(self) -> bool:
        return self.kind == "real"

    def app_pods(self, app_id: str) -> list[Any]:
        listed = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"spark-app-selector={app_id}"
        )
        return list(listed.items)

    def pod_ids(self, app_id: str) -> set[int]:
        return {int(p.metadata.labels["spark-exec-id"]) for p in self.app_pods(app_id)}

    def running_ids(self, app_id: str) -> set[int]:
        return {
            int(p.metadata.labels["spark-exec-id"])
            for p in self.app_pods(app_id)
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }

    def label_namespace(self, labels: dict[str, str]) -> None:
        self.core.patch_namespace(self.namespace, {"metadata": {"labels": labels}})


def _core(api_client: Any) -> CoreApi:
    return client.CoreV1Api(api_client)


@pytest.fixture(params=["kubesim", pytest.param("real", marks=pytest.mark.real_server)])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    namespace = f"t-{secrets.token_hex(4)}"
    marker = request.node.get_closest_marker("cluster")
    cfg: ClusterConfig = marker.args[0] if marker else FAST
    if request.param == "kubesim":
        with KubeSim(cluster=cfg, namespaces=[namespace]) as sim:
            api: Any = client.ApiClient(client.Configuration(host=sim.url))
            props = simulator_properties(
                sim.url, "app", **{"spark.kubernetes.namespace": namespace}
            )
            yield Target(
                kind="kubesim", namespace=namespace, nodes=sim.cluster, core=_core(api),
                properties=props,
            )  # fmt: skip
            api.close()
        return
    server: RealServer = request.getfixturevalue("real_server")
    ensure_namespace(server, namespace)
    loader: Any = config.new_client_from_config
    api = loader(config_file=str(server.kubeconfig_path))
    nodes = NodeSimulator(
        url=server.url,
        token=server.token,
        ca_file=str(server.ca_path),
        namespaces=(namespace,),
        config=_named(cfg, namespace),
    )
    _grant_sidecar_role(server, namespace)
    props = simulator_properties("", "app", **{"spark.kubernetes.namespace": namespace})
    del props["execpods.kubernetes.apiUrl"]
    # The sidecar as a workload, not an admin: the project's own Role (deploy/rbac.yaml),
    # checked at start-up by the sidecar, enforced by the real RBAC authorizer, and queued by
    # API Priority and Fairness (the admin's system:masters is exempt from it).
    props["execpods.kubernetes.kubeconfig"] = str(server.user_kubeconfig())
    props["execpods.sidecar.checkPermissions"] = "true"
    with nodes:
        yield Target(
            kind="real", namespace=namespace, nodes=nodes.simulation, core=_core(api),
            properties=props, server=server,
        )  # fmt: skip
    # Nothing of this test may linger for the next (a conformance test lists every
    # namespace): what is left goes at once, then the namespace.
    server.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
    server.request("DELETE", f"/api/v1/namespaces/{namespace}")
    api.close()


RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def _grant_sidecar_role(server: RealServer, namespace: str) -> None:
    """deploy/rbac.yaml's Role in ``namespace``, bound to the server's non-admin user."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "Role")
    role["metadata"]["namespace"] = namespace
    base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    code, answer = server.request("POST", f"{base}/roles", role)
    assert code == 201, answer
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "execpods-sidecar", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    code, answer = server.request("POST", f"{base}/rolebindings", binding)
    assert code == 201, answer


def _named(cfg: ClusterConfig, namespace: str) -> ClusterConfig:
    import dataclasses

    return dataclasses.replace(cfg, node_prefix=f"{namespace}-node-")


SidecarFactory = Callable[..., EmbeddedSidecar]


@pytest.fixture
def make_sidecar(target: Target) -> Iterator[SidecarFactory]:
    """Start sidecars on the target: ``make_sidecar(app_id, conf={...})``; stopped at the end."""
    started: list[EmbeddedSidecar] = []

    def make(app_id: str, *, conf: dict[str, str] | None = None) -> EmbeddedSidecar:
        props = {
            **target.properties,
            "spark.app.id": app_id,
            "spark.executor.instances": "0",
            "spark.kubernetes.allocation.batch.delay": "150ms",
            "spark.kubernetes.executor.eventProcessingInterval": "100ms",
            **(conf or {}),
        }
        sidecar = EmbeddedSidecar(props)
        sidecar.start()
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in reversed(started):
        sidecar.stop()
