"""Bad-node avoidance and the registration timeout end to end: a sidecar over real HTTP to the
simulator, driven and observed over real gRPC."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from execpods.client import AllocatorClient, StreamUpdate
from execpods.core import AllocatorNotice, ExecutorPodsSnapshot, NoticeKind
from execpods.core.labels import SPARK_LABELS
from execpods.kubesim import KubeSim
from execpods.sidecar.telemetry.metrics import SidecarMetrics
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.sidecar.capacity_support import collect, notices
from tests.sidecar.conftest import SidecarFactory, app_pods, running_ids, wait_for
from tests.sidecar.test_observability import METRICS_CONF, scrape, value

BAD_NODES = {
    "execpods.badNodes.enabled": "true",
    "execpods.badNodes.maxFailures": "2",
    "execpods.badNodes.failureWindow": "60s",
    "execpods.badNodes.coolDown": "2s",
    "spark.kubernetes.executor.apiPollingInterval": "100ms",
    "spark.executor.maxNumFailures": "100",
}


def _avoided(pod: Any) -> list[str]:
    affinity = pod["spec"].get("affinity")
    if not affinity:
        return []
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [
        v for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"] for v in e["values"]
    ]


def test_executors_keep_off_a_bad_node_until_its_cool_down_ends(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    bad = sim.nodes()[0].name
    sim.crash_pods_on(bad)
    sidecar = make_sidecar("nodes", conf=BAD_NODES)
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        collect(iter(stream), updates)
        client.request_total(3)
        wait_for(lambda: notices(updates, "node_blocked"), what="the bad node blocked")
        assert bad in notices(updates, "node_blocked")[0]
        wait_for(lambda: len(running_ids(sim, "nodes")) == 3, what="three executors running")
        running = [p for p in app_pods(sim, "nodes") if p["status"].get("phase") == "Running"]
        assert all(p["spec"]["nodeName"] != bad for p in running)
        assert any(_avoided(p) == [bad] for p in running), "a replacement was kept off it"
        sim.crash_pods_on(bad, crashing=False)  # the node is repaired
        wait_for(lambda: notices(updates, "node_unblocked"), what="the block lifted")
        assert bad in notices(updates, "node_unblocked")[0]
        client.request_total(6)
        wait_for(lambda: len(running_ids(sim, "nodes")) == 6, what="six executors running")
        newest = max(
            app_pods(sim, "nodes"), key=lambda p: int(p["metadata"]["labels"]["spark-exec-id"])
        )
        assert _avoided(newest) == []
        on_bad = [p for p in app_pods(sim, "nodes") if p["spec"].get("nodeName") == bad]
        assert any(p["status"].get("phase") == "Running" for p in on_bad), "the node is used again"


def test_a_running_executor_that_never_registers_is_replaced(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    """... and its delete, like every pod call a feature makes, is counted in the metrics."""
    sidecar = make_sidecar(
        "registration",
        conf={"spark.kubernetes.executor.apiPollingInterval": "100ms", **METRICS_CONF},
    )
    updates: list[StreamUpdate] = []
    with (
        grpc.insecure_channel(sidecar.address) as channel,
        AllocatorClient(sidecar.address) as client,
        client.stream_snapshots() as stream,
    ):
        collect(iter(stream), updates)
        stub = pb_grpc.ExecutorAllocatorStub(channel)
        client.update_driver_executors(explicit=True, registration_timeout_ms=800)
        client.request_total(2)
        wait_for(lambda: running_ids(sim, "registration") == {1, 2}, what="two running")
        stub.UpdateDriverExecutors(
            pb.UpdateDriverExecutorsRequest(registered=[1], explicit=True), timeout=10
        )
        wait_for(lambda: 3 in running_ids(sim, "registration"), what="executor 2 replaced")
        removals = [r for u in list(updates) for r in u.removed if r.executor_id == 2]
        assert len(removals) == 1
        assert "without registering with the driver" in removals[0].message
        assert (removals[0].exit_code, removals[0].exit_caused_by_app) == (-1, False)
        assert 1 in running_ids(sim, "registration"), "the registered executor stays"
        deleted = value(scrape(sidecar.server.ops.metrics_address), "execpods_pods_deleted_total")
        assert deleted == 1, "the registration timeout's delete is counted, once"
        with pytest.raises(grpc.RpcError) as refused:
            stub.UpdateDriverExecutors(
                pb.UpdateDriverExecutorsRequest(registration_timeout_ms=-1), timeout=10
            )
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_blocked_nodes_are_counted_in_the_metrics() -> None:
    metrics = SidecarMetrics(snapshot=ExecutorPodsSnapshot, labels=SPARK_LABELS, targets=dict)

    def notice(kind: NoticeKind) -> AllocatorNotice:
        return AllocatorNotice(kind=kind, message="node-a", resource_profile_id=0)

    metrics.notice(notice(NoticeKind.NODE_BLOCKED))
    metrics.notice(notice(NoticeKind.NODE_BLOCKED))
    metrics.notice(notice(NoticeKind.NODE_UNBLOCKED))
    registry = metrics.registry
    assert registry.get_sample_value("execpods_blocked_nodes") == 1
    assert (
        registry.get_sample_value("execpods_allocator_notices_total", {"kind": "node_blocked"}) == 2
    )
