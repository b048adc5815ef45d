"""The lean create path (`transport.CreateTransport`) against kubesim over real HTTP: the same
answers and typed errors as the official client, kept-alive connections, the client's
credentials, and a lost answer told apart."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from execpods.core import (
    ApiUnavailable,
    PodForbidden,
    PodOperationError,
)
from execpods.k8s import ApiGateway, KubernetesApiClient, KubernetesPodOperations, connect
from execpods.k8s.transport import IDLE_LIMIT, CreateTransport
from execpods.kubesim import KubeSim

from tests.k8s.conftest import APP_ID, executor_pod

RBAC: list[dict[str, object]] = [
    {"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": "sc", "namespace": "ns"}},
    {
        "kind": "Role",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": "pods", "namespace": "ns"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}],
    },
    {
        "kind": "RoleBinding",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": "pods", "namespace": "ns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "sc", "namespace": "ns"}],
    },
]


def test_a_dry_run_create_says_so_on_the_lean_path(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    """The lean create path passes `dryRun=All` on; kubesim, which serves no dry runs, refuses
    it with a 400 naming it (so nothing is written), which the caller sees as it is."""
    gateway = ApiGateway(api_client, namespace="default", request_timeout=5, create_pool=2)
    with pytest.raises(PodOperationError, match="dryRun=All"):
        gateway.create_pod("dry", executor_pod(7), dry_run=True)
    assert sim.requests()[-1].query.get("dryRun") == "All"
    assert sim.pod("dry") is None, "a dry run wrote nothing"
    gateway.close()


def test_creates_reuse_a_kept_alive_connection_per_create_in_flight(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    gateway = ApiGateway(api_client, namespace="default", request_timeout=5, create_pool=3)
    operations = KubernetesPodOperations(gateway)
    transport = gateway.create_transport
    assert transport is not None
    for executor_id in range(1, 21):
        operations.create(executor_pod(executor_id))
    assert transport.connections == 1, "one caller after another: one connection"
    ids = iter(range(100, 160))
    lock = threading.Lock()

    def creates() -> None:
        for _ in range(20):
            with lock:
                executor_id = next(ids)
            operations.create(executor_pod(executor_id))

    threads = [threading.Thread(target=creates) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sim.pods()) == 80
    assert transport.connections <= 3, "at most one connection per create in flight"
    gateway.close()


def test_an_idle_connection_is_not_reused_past_the_limit(sim: KubeSim) -> None:
    client = connect(api_url=sim.url)
    now = [0.0]
    transport = CreateTransport(
        client.configuration, headers=dict, pool_size=2, connect_timeout=5, clock=lambda: now[0]
    )
    path = "/api/v1/namespaces/default/pods"
    assert transport.post(path, orjson.dumps(executor_pod(1)), timeout=5).status == 201
    now[0] += IDLE_LIMIT / 2
    assert transport.post(path, orjson.dumps(executor_pod(2)), timeout=5).status == 201
    assert transport.connections == 1
    now[0] += IDLE_LIMIT
    answer = transport.post(path, orjson.dumps(executor_pod(2)), timeout=5)
    assert answer.status == 409
    assert transport.connections == 2
    transport.close()
    client.close()


def test_creates_carry_the_clients_credentials(tmp_path: Path) -> None:
    with KubeSim(rbac=RBAC) as sim:
        sim.create_namespace("ns")
        token = sim.token_for("sc", "ns")
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", namespace="ns", token=token)
        client = connect(kubeconfig=kubeconfig)
        gateway = ApiGateway(client, namespace="ns", request_timeout=5, create_pool=2)
        assert gateway.create_transport is not None
        KubernetesPodOperations(gateway).create(executor_pod(1))
        assert sim.pod(f"{APP_ID}-exec-1", namespace="ns") is not None
        other = ApiGateway(client, namespace="default", request_timeout=5, create_pool=2)
        with pytest.raises(PodForbidden):  # the token's identity, not the admin's
            KubernetesPodOperations(other).create(executor_pod(2))
        gateway.close()
        other.close()
        client.close()


def test_a_proxy_keeps_creates_on_the_official_client(sim: KubeSim) -> None:
    client = connect(api_url=sim.url)
    client.configuration.proxy = "http://127.0.0.1:9"  # type: ignore[attr-defined]
    gateway = ApiGateway(client, namespace="default", create_pool=4)
    assert gateway.create_transport is None
    client.close()


@pytest.fixture
def hanging_up() -> Iterator[str]:
    """A server that reads a request and closes the connection without an answer."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.recv(65536)
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


def test_a_create_without_an_answer_may_have_happened(hanging_up: str) -> None:
    client = connect(api_url=hanging_up)
    gateway = ApiGateway(client, namespace="default", request_timeout=2, create_pool=2)
    with pytest.raises(ApiUnavailable, match="create pod") as lost:
        KubernetesPodOperations(gateway).create(executor_pod(1))
    assert lost.value.outcome_unknown, "the core tracks it until the pod shows or times out"
    client.close()
