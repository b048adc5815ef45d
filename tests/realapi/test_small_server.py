"""The sidecar on a small real API server: API Priority and Fairness with two seats in all.

Outside the check (it starts a server of its own): ``EXECPODS_REAL_TIER=full``. The sidecar runs
as a workload user, whom APF queues (the admin's system:masters would be exempt), against
``--max-requests-inflight=1 --max-mutating-requests-inflight=1``.
"""

from __future__ import annotations

import os
import re
import time

import pytest
from execpods.client import AllocatorClient
from execpods.devtools.realserver.harness import ensure_namespace
from execpods.devtools.realserver.server import RealServer, ServerOptions
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import ClusterConfig
from execpods.kubesim.nodesim import NodeSimulator
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.realapi.conftest import _grant_sidecar_role

pytestmark = pytest.mark.skipif(
    os.environ.get("EXECPODS_REAL_TIER") != "full",
    reason="the full real-server tier (EXECPODS_REAL_TIER=full): it starts a server of its own",
)


def _dispatched(server: RealServer, level: str) -> float:
    code, text = server.request("GET", "/metrics", headers={"Accept": "text/plain"})
    assert code == 200
    pattern = re.compile(
        r'^apiserver_flowcontrol_dispatched_requests_total\{[^}]*priority_level="'
        + re.escape(level)
        + r'"[^}]*\} (\S+)$',
        re.M,
    )
    return sum(float(v) for v in pattern.findall(str(text)))


def test_a_small_server_queues_the_sidecar_and_it_still_reaches_the_target() -> None:
    options = ServerOptions(max_requests_inflight=1, max_mutating_requests_inflight=1)
    with RealServer(options=options) as server:
        namespace = "small"
        ensure_namespace(server, namespace)
        _grant_sidecar_role(server, namespace)
        before = _dispatched(server, "global-default")
        config = ClusterConfig(nodes=4, start_latency=0.2, start_jitter=0.1, stop_latency=0.05)
        with NodeSimulator(
            url=server.url,
            token=server.token,
            ca_file=str(server.ca_path),
            namespaces=(namespace,),
            config=config,
        ):
            props = simulator_properties("", "small", **{"spark.kubernetes.namespace": namespace})
            del props["execpods.kubernetes.apiUrl"]
            props["execpods.kubernetes.kubeconfig"] = str(server.user_kubeconfig())
            props["spark.kubernetes.allocation.batch.size"] = "20"
            props["spark.kubernetes.allocation.batch.delay"] = "200ms"
            sidecar = EmbeddedSidecar(props)
            sidecar.start()
            try:
                with AllocatorClient(sidecar.address) as driver:
                    driver.request_total(60)
                    deadline = time.monotonic() + 120
                    while True:
                        pods = server.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
                        running = [p for p in pods if p["status"].get("phase") == "Running"]
                        if len(running) == 60:
                            break
                        assert time.monotonic() < deadline, f"{len(running)} of 60 running"
                        time.sleep(0.2)
            finally:
                sidecar.stop()
        # The sidecar's requests went through APF's queues at a non-exempt level.
        assert _dispatched(server, "global-default") - before >= 60
