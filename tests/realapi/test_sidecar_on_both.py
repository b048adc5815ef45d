"""The sidecar's API behaviour on kubesim and on a real kube-apiserver, one test for both.

What kubesim was tuned to agree with is checked against a server nobody here wrote: allocation to
a target and back down, a restart that reuses no executor id (the id ledger on a real ConfigMap),
a host-network template refused first by the sidecar's own policy and, with that policy off, by
the real PodSecurity admission at ``baseline``, a namespace ResourceQuota, and an eviction through
the Eviction API. Real gRPC to an embedded sidecar, the official client to the server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from execpods.client import AllocatorClient
from execpods.k8s.ledger import DATA_KEY, ledger_config_map_name
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.realapi.conftest import SidecarFactory, Target


def wait_for(condition: Callable[[], Any], *, timeout: float = 30.0, what: str = "") -> Any:
    """Poll until ``condition`` is truthy (the servers run on real time); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.05)
    return value


def _notices(address: str, found: list[pb.AllocatorNotice]) -> Callable[[], None]:
    """Follow a stream's notices from now on; returns the call's cancel."""
    channel = grpc.insecure_channel(address)
    call = pb_grpc.ExecutorAllocatorStub(channel).StreamSnapshots(
        pb.StreamSnapshotsRequest(batch_interval_ms=50)
    )
    opened = threading.Event()

    def read() -> None:
        try:
            for message in call:
                opened.set()
                found.extend(message.allocator_notices)
        except grpc.RpcError:
            pass

    threading.Thread(target=read, daemon=True).start()
    assert opened.wait(10), "the stream opened"

    def cancel() -> None:
        call.cancel()
        channel.close()

    return cancel


def test_allocation_reaches_the_target_and_scales_down(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("alloc")
    with AllocatorClient(sidecar.address) as driver:
        driver.request_total(3)
        wait_for(lambda: target.running_ids("alloc") == {1, 2, 3}, what="three running")
        driver.request_total(1)
        assert driver.kill_executors([2, 3]) == 2
        wait_for(lambda: target.pod_ids("alloc") == {1}, what="two pods gone")
        time.sleep(0.5)  # a few allocation rounds: nothing is replaced below the target
        assert target.running_ids("alloc") == {1}


def test_a_restart_reuses_no_executor_id(target: Target, make_sidecar: SidecarFactory) -> None:
    first = make_sidecar("ids")
    with AllocatorClient(first.address) as driver:
        driver.request_total(3)
        wait_for(lambda: target.running_ids("ids") == {1, 2, 3}, what="three running")
    first.stop()  # deletes every executor pod: only the ledger remembers the ids
    wait_for(lambda: not target.app_pods("ids"), what="every executor pod gone")
    ledgers = target.core.list_namespaced_config_map(target.namespace).items
    assert any("ids" in (c.metadata.name or "") for c in ledgers), "the ledger ConfigMap"
    second = make_sidecar("ids")
    with AllocatorClient(second.address) as driver:
        driver.request_total(3)
        wait_for(lambda: len(target.running_ids("ids")) == 3, what="three running again")
    assert min(target.running_ids("ids")) > 3


def test_the_ledger_keeps_a_concurrent_writers_mark(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    """Someone raises the ledger's mark while the sidecar runs: the sidecar's next write,
    based on a stale resourceVersion, gets the server's 409, re-reads, and never lowers the
    mark; a restarted sidecar issues ids above it."""
    first = make_sidecar("led")
    name = ledger_config_map_name("led")
    with AllocatorClient(first.address) as driver:
        driver.request_total(2)
        wait_for(lambda: target.running_ids("led") == {1, 2}, what="two running")
        target.core.patch_namespaced_config_map(name, target.namespace, {"data": {DATA_KEY: "10"}})
        driver.request_total(4)
        wait_for(lambda: len(target.running_ids("led")) == 4, what="four running")
    mark = target.core.read_namespaced_config_map(name, target.namespace).data[DATA_KEY]
    assert int(mark) >= 10, f"the ledger's mark went down to {mark}"
    first.stop()
    wait_for(lambda: not target.app_pods("led"), what="every executor pod gone")
    second = make_sidecar("led")
    with AllocatorClient(second.address) as driver:
        driver.request_total(2)
        wait_for(lambda: len(target.running_ids("led")) == 2, what="two running again")
    assert min(target.running_ids("led")) > 10


HOST_NETWORK = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {},
    "spec": {"hostNetwork": True, "containers": [{"name": "executor", "image": "x"}]},
}
"""Refused by Pod Security Standards' baseline (host namespaces). A privileged container would
not do here: the builder sets allowPrivilegeEscalation=false as Spark does, and kube-apiserver's
validation refuses that pair (422) before admission runs."""


def _request_host_network(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        pb_grpc.ExecutorAllocatorStub(channel).RequestTotal(
            pb.RequestTotalRequest(
                total=0,
                profile_totals={1: 1},
                profiles=[pb.ResourceProfile(id=1, cores=1, pod_template=json.dumps(HOST_NETWORK))],
            ),
            timeout=10,
        )


def test_a_host_network_template_is_refused_by_the_sidecar_then_by_pod_security(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    target.label_namespace({"pod-security.kubernetes.io/enforce": "baseline"})
    guarded = make_sidecar("guarded")
    with pytest.raises(grpc.RpcError) as refused:
        _request_host_network(guarded.address)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.hostNetwork" in (refused.value.details() or "")
    assert target.app_pods("guarded") == []
    if not target.real:
        return  # kubesim has no PodSecurity admission (docs/kubesim.md, fidelity)
    open_ = make_sidecar("open", conf={"execpods.sidecar.templatePolicy": "none"})
    found: list[pb.AllocatorNotice] = []
    cancel = _notices(open_.address, found)
    try:
        _request_host_network(open_.address)
        wait_for(lambda: any(n.kind == pb.AllocatorNotice.KIND_CREATE_REFUSED for n in found),
                 what="the refused create on the stream")  # fmt: skip
    finally:
        cancel()
    refusal = next(n for n in found if n.kind == pb.AllocatorNotice.KIND_CREATE_REFUSED)
    assert 'violates PodSecurity "baseline:latest"' in refusal.message, refusal.message
    assert target.app_pods("open") == []


def _quota(target: Target, pods: int) -> None:
    quota = {"metadata": {"name": "executors"}, "spec": {"hard": {"count/pods": str(pods)}}}
    target.core.create_namespaced_resource_quota(target.namespace, quota)
    wait_for(lambda: target.core.read_namespaced_resource_quota("executors", target.namespace)
             .status.hard, what="the quota's status (the controller manager)")  # fmt: skip


def test_a_resource_quota_caps_the_executors(target: Target, make_sidecar: SidecarFactory) -> None:
    _quota(target, 2)
    sidecar = make_sidecar("quota")
    with AllocatorClient(sidecar.address) as driver:
        driver.request_total(4)
        wait_for(lambda: len(target.running_ids("quota")) == 2, what="two running")
        time.sleep(1.0)  # rounds go by: the quota holds the rest back
        assert len(target.app_pods("quota")) == 2


def test_more_executors_run_once_the_quota_grows(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    _quota(target, 2)
    sidecar = make_sidecar("grow")
    with AllocatorClient(sidecar.address) as driver:
        driver.request_total(4)
        wait_for(lambda: len(target.running_ids("grow")) == 2, what="two running")
        time.sleep(1.0)
        target.core.patch_namespaced_resource_quota(
            "executors", target.namespace, {"spec": {"hard": {"count/pods": "4"}}}
        )
        wait_for(lambda: len(target.running_ids("grow")) == 4, timeout=10, what="four")


def test_an_eviction_through_the_eviction_api_is_replaced(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("evict")
    with AllocatorClient(sidecar.address) as driver:
        driver.request_total(2)
        wait_for(lambda: target.running_ids("evict") == {1, 2}, what="two running")
        victim = next(
            p.metadata.name
            for p in target.app_pods("evict")
            if p.metadata.labels["spark-exec-id"] == "1"
        )
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim}}
        target.core.create_namespaced_pod_eviction(victim, target.namespace, body)
        wait_for(lambda: target.running_ids("evict") == {2, 3}, what="executor 1 replaced")
