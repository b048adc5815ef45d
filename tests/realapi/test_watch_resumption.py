"""The sidecar's watch across a real API server restart with etcd compacted meanwhile.

Outside the check (it starts a server of its own): ``EXECPODS_REAL_TIER=full``. The restarted
kube-apiserver's watch cache starts from etcd afresh, and the versions before the compaction are
gone: the sidecar's resumed watch gets 410 Gone and re-lists. Afterwards it must still see what
happens to its pods (a killed executor replaced with a new id), and reuse no id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from execpods.client import AllocatorClient
from execpods.devtools.realserver.harness import ensure_namespace
from execpods.devtools.realserver.server import RealServer
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import ClusterConfig
from execpods.kubesim.nodesim import NodeSimulator
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.realapi.conftest import _grant_sidecar_role

pytestmark = pytest.mark.skipif(
    os.environ.get("EXECPODS_REAL_TIER") != "full",
    reason="the full real-server tier (EXECPODS_REAL_TIER=full): it starts a server of its own",
)

NS = "resume"


def _wait(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _ids(server: RealServer, *, running: bool) -> set[int]:
    listed = server.get(f"/api/v1/namespaces/{NS}/pods") or {"items": []}
    return {
        int(p["metadata"]["labels"]["spark-exec-id"])
        for p in listed["items"]
        if not p["metadata"].get("deletionTimestamp")
        and (not running or p["status"].get("phase") == "Running")
    }


def test_the_watch_resumes_after_a_restart_with_compaction() -> None:
    with RealServer() as server:
        ensure_namespace(server, NS)
        _grant_sidecar_role(server, NS)
        config = ClusterConfig(nodes=2, start_latency=0.2, start_jitter=0.1, stop_latency=0.05)
        nodes = NodeSimulator(
            url=server.url, token=server.token, ca_file=str(server.ca_path), namespaces=(NS,),
            config=config,
        )  # fmt: skip
        with nodes:
            props = simulator_properties("", "resume", **{"spark.kubernetes.namespace": NS})
            del props["execpods.kubernetes.apiUrl"]
            props["execpods.kubernetes.kubeconfig"] = str(server.user_kubeconfig())
            props["spark.kubernetes.allocation.batch.delay"] = "150ms"
            sidecar = EmbeddedSidecar(props)
            sidecar.start()
            try:
                with AllocatorClient(sidecar.address) as driver:
                    driver.request_total(2)
                    _wait(lambda: _ids(server, running=True) == {1, 2}, "two running")
                    server.restart_apiserver(compact=True)
                    # A pod deleted behind the sidecar's back after the restart: only a watch
                    # (or list) that works again tells the sidecar, which replaces it.
                    victim = next(
                        p["metadata"]["name"]
                        for p in server.get(f"/api/v1/namespaces/{NS}/pods")["items"]
                        if p["metadata"]["labels"]["spark-exec-id"] == "1"
                    )
                    server.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{victim}")
                    _wait(lambda: _ids(server, running=True) == {2, 3}, "executor 1 replaced by 3")
                    driver.request_total(3)
                    _wait(lambda: _ids(server, running=True) == {2, 3, 4}, "three running")
            finally:
                sidecar.stop()
