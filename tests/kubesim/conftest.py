"""Fixtures for the simulator tests: a deterministic simulator, the official client against it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, TypeAlias, cast

import orjson
import pytest
from execpods.kubesim import ClusterConfig, KubeSim
from kubernetes import client, config, watch

NS = "default"

# The client's generated models make every field Optional, which would bury each assertion
# under None checks; the tests read them dynamically instead.
CoreApi: TypeAlias = Any
ClientApi: TypeAlias = Any


def new_client(url: str) -> ClientApi:
    """An ApiClient for ``url`` (close it when done)."""
    return client.ApiClient(client.Configuration(host=url))


def core_api(api_client: ClientApi) -> CoreApi:
    return client.CoreV1Api(api_client)


@contextlib.contextmanager
def core_for(sim: KubeSim) -> Iterator[CoreApi]:
    """The official client's CoreV1Api for a simulator the test started itself; closed on exit."""
    api_client = new_client(sim.url)
    try:
        yield core_api(api_client)
    finally:
        api_client.close()


def new_watch() -> Any:
    """The client's ``watch.Watch`` (untyped upstream)."""
    factory: Any = watch.Watch
    return factory()


def pod_body(
    name: str | None = None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    image: str = "busybox:1.36",
    restart_policy: str = "Never",
    generate_name: str | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {}}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if annotations:
        meta["annotations"] = annotations
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": "main", "image": image}],
        },
    }


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The conformance modules run on kubesim and on the real API server (``[real]``), unless a
    test is marked ``kubesim_only`` with the reason (docs/kubesim.md's fidelity table). A test
    that starts a simulator of its own says so by using ``server_kind``."""
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    on_a_server = {"sim", "server_kind"} & set(metafunc.fixturenames)
    if not on_a_server or not module.startswith("test_conformance_"):
        return
    only = metafunc.definition.get_closest_marker("kubesim_only")
    real = pytest.param("real", marks=pytest.mark.real_server)  # one worker runs these
    kinds = ["kubesim"] if only else ["kubesim", real]
    metafunc.parametrize("server_kind", kinds, indirect=True)


@pytest.fixture
def server_kind(request: pytest.FixtureRequest) -> str:
    kind: str = getattr(request, "param", "kubesim")
    return kind


@contextlib.contextmanager
def cluster_on(
    server_kind: str, request: pytest.FixtureRequest, cfg: ClusterConfig
) -> Iterator[KubeSim]:
    """Nodes shaped by ``cfg`` on the server ``server_kind`` names: a deterministic KubeSim, or
    the session's real API server with simulated nodes on a virtual clock."""
    if server_kind == "real":
        from execpods.devtools.realserver.harness import real_cluster

        with real_cluster(request.getfixturevalue("real_server"), cfg, ("default", "other")) as c:
            yield cast(KubeSim, c)  # the part of KubeSim's surface a real cluster has
        return
    with KubeSim(cluster=cfg, deterministic=True, bookmark_interval=30.0) as s:
        yield s


@pytest.fixture
def sim(server_kind: str, request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    cfg = ClusterConfig(
        nodes=2, pods_per_node=3, start_latency=1.0, start_jitter=0.5, stop_latency=0.5, seed=7
    )
    with cluster_on(server_kind, request, cfg) as s:
        yield s


@contextlib.contextmanager
def client_of(sim: KubeSim) -> Iterator[ClientApi]:
    """The official client through the server's kubeconfig (TLS and token on a real one)."""
    loader: Any = config.new_client_from_config
    c = loader(config_file=str(sim.kubeconfig_path))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def api_client(sim: KubeSim) -> Iterator[ClientApi]:
    with client_of(sim) as c:
        yield c


@pytest.fixture
def core(api_client: ClientApi) -> CoreApi:
    return core_api(api_client)


def read_events(resp: Any, limit: int = 1000) -> list[dict[str, Any]]:
    """Read watch events from a raw response until ``limit`` arrived or the stream ends (its
    ``timeoutSeconds`` bounds the wait)."""
    events: list[dict[str, Any]] = []
    buf = b""
    for chunk in resp.stream(65536):
        buf += chunk
        while b"\n" in buf and len(events) < limit:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                events.append(orjson.loads(line))
        if len(events) >= limit:
            resp.close()
            return events
    resp.release_conn()
    return events


def open_watch(core: CoreApi, timeout: int = 2, **kwargs: Any) -> Any:
    """Start a watch and return the raw response: the server has registered it on return."""
    return core.list_namespaced_pod(
        NS,
        watch=True,
        timeout_seconds=timeout,
        _preload_content=False,
        _request_timeout=(5, timeout + 10),
        **kwargs,
    )
