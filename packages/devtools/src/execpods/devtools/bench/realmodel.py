"""The real kube-apiserver as one more server model of the cross-model benchmark (`servers.py`).

etcd, kube-apiserver and kube-controller-manager from the pinned Go builds
(`execpods.devtools.realserver`, `python3 tools/dev.py gobuild`), with kubesim's node simulator
playing the nodes over HTTP (`execpods.kubesim.nodesim`): pods start 1 s after they are bound.
Every sidecar talks TLS with the server's CA and a bearer token from its kubeconfig, so this
model is also the create transport's proof against a server no one here wrote. The sidecars use
the admin identity (system:masters: exempt from API Priority and Fairness), so this row is the
real server idle; the bound is the start latency plus the executors at the rate of
as-fast-as-possible creates over 4 kept-alive TLS connections, measured in the same run.
"""

from __future__ import annotations

import http.client
import math
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import orjson
from execpods.devtools.bench.congestion_run import APP_LABEL, Policy, Running, scale, sidecars
from execpods.devtools.realserver.harness import ensure_namespace
from execpods.devtools.realserver.server import RealServer
from execpods.kubesim import ClusterConfig
from execpods.kubesim.nodesim import NodeSimulator

START = 1.0


def raw_create_rate(server: RealServer, namespace: str, count: int, connections: int = 4) -> float:
    """Creates a second over `connections` kept-alive TLS connections, as fast as they go."""
    host, port = server.url.removeprefix("https://").split(":")
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    per = math.ceil(count / connections)

    def run(worker: int) -> None:
        conn = http.client.HTTPSConnection(host, int(port), context=server.ssl_context())
        try:
            for i in range(per):
                body = orjson.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": f"bound-{worker}-{i}", "labels": {"bound": "1"}},
                        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                    }
                )
                conn.request("POST", f"/api/v1/namespaces/{namespace}/pods", body, headers)
                conn.getresponse().read()
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(w,)) for w in range(connections)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return per * connections / (time.perf_counter() - started)


@contextmanager
def _counting(server: RealServer, namespace: str, apps: Sequence[str]) -> Iterator[Running]:
    """Running pods per app, from lists of the namespace every 0.2 s."""
    running = Running()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.2):
            pods = (server.get(f"/api/v1/namespaces/{namespace}/pods") or {}).get("items", [])
            names: dict[str, set[str]] = {app: set() for app in apps}
            for pod in pods:
                app = (pod["metadata"].get("labels") or {}).get(APP_LABEL)
                if app in names and pod["status"].get("phase") == "Running":
                    names[app].add(pod["metadata"]["name"])
            with running.changed:
                running.names = names
                running.changed.notify_all()

    thread = threading.Thread(target=poll, name="count-running", daemon=True)
    thread.start()
    try:
        yield running
    finally:
        stop.set()
        thread.join(10)


def run_real(server: RealServer, executors: int, apps: int, policy: Policy) -> list[float | None]:
    """Each app's seconds to its share of `executors` Running, in a fresh namespace."""
    namespace = f"real-{uuid.uuid4().hex[:6]}"
    ensure_namespace(server, namespace)
    names = [f"{namespace}-{i}" for i in range(apps)]
    each = executors // apps
    config = ClusterConfig(
        nodes=math.ceil(executors / 110) + 2,
        start_latency=START,
        start_jitter=0.0,
        node_prefix=f"{namespace}-node-",
    )
    where = [
        "--conf",
        f"execpods.kubernetes.kubeconfig={server.kubeconfig_path}",
        "--conf",
        f"spark.kubernetes.namespace={namespace}",
    ]
    nodes = NodeSimulator(
        url=server.url,
        token=server.token,
        ca_file=str(server.ca_path),
        namespaces=(namespace,),
        config=config,
    )
    with (
        nodes,
        _counting(server, namespace, names) as running,
        sidecars(None, names, policy, server=where) as drivers,
    ):
        scale(drivers, running, each, timeout=300)
    return [d.seconds for d in drivers]


def bound_of(server: RealServer, executors: int) -> float:
    namespace = f"bound-{uuid.uuid4().hex[:6]}"
    ensure_namespace(server, namespace)
    rate = raw_create_rate(server, namespace, min(executors, 1_000))
    print(f"real: as-fast-as-possible creates {rate:.0f}/s", flush=True)
    server.request("DELETE", f"/api/v1/namespaces/{namespace}")
    return START + executors / rate
