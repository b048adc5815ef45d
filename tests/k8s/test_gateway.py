"""The gateway's typed pod calls, over HTTP against the simulator: what reaches the API server."""

from __future__ import annotations

import ast
import inspect

import pytest
from execpods.core import PodNotFound
from execpods.k8s import ApiGateway, KubernetesPodOperations
from execpods.k8s import gateway as gateway_module
from execpods.kubesim import KubeSim

from tests.k8s.conftest import APP_ID, eventually, executor_pod

SELECTOR = f"spark-app-selector={APP_ID}"


def test_each_call_reaches_the_api_with_its_parameters(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    gateway = operations.gateway
    name = f"{APP_ID}-exec-1"
    gateway.create_pod(name, executor_pod(1))
    body = gateway.read_pod(name)
    assert isinstance(body, dict)
    assert body["metadata"]["name"] == name
    gateway.patch_pod(name, {"metadata": {"labels": {"x": "y"}}}, what="label")
    listed = gateway.list_pods(SELECTOR, "status.phase!=Failed", resource_version="0")
    assert isinstance(listed, dict)
    assert [p["metadata"]["labels"]["x"] for p in listed["items"]] == ["y"]
    records = {r.verb: r for r in sim.requests()}
    assert records["list"].query == {
        "labelSelector": SELECTOR,
        "fieldSelector": "status.phase!=Failed",
        "resourceVersion": "0",
    }
    assert records["patch"].status == 200


def test_an_unset_parameter_is_not_sent(sim: KubeSim, operations: KubernetesPodOperations) -> None:
    operations.gateway.list_pods(SELECTOR)
    (record,) = [r for r in sim.requests() if r.verb == "list"]
    assert record.query == {"labelSelector": SELECTOR}


def test_delete_with_a_zero_grace_period_removes_a_running_pod_at_once(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    gateway = operations.gateway
    for executor_id in (1, 2):
        gateway.create_pod(f"{APP_ID}-exec-{executor_id}", executor_pod(executor_id))
    sim.run_until_idle()
    assert {p["status"]["phase"] for p in sim.pods()} == {"Running"}
    gateway.delete_pod(f"{APP_ID}-exec-1")  # the pod's own grace period: it terminates first
    gateway.delete_pod(f"{APP_ID}-exec-2", grace_period_seconds=0)
    remaining = {p["metadata"]["name"]: p["metadata"] for p in sim.pods()}
    assert list(remaining) == [f"{APP_ID}-exec-1"]
    assert remaining[f"{APP_ID}-exec-1"].get("deletionTimestamp")
    deletes = [r.query for r in sim.requests() if r.verb == "delete"]
    assert deletes == [{}, {"gracePeriodSeconds": "0"}]
    with pytest.raises(PodNotFound):
        gateway.delete_pod(f"{APP_ID}-exec-2")


def test_watch_pods_opens_a_bookmarked_watch_from_a_version(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    version = sim.resource_version
    response = operations.gateway.watch_pods(
        SELECTOR, resource_version=version, timeout_seconds=1, read_timeout=5
    )
    try:
        assert sim.wait_for_watchers(1)
        sim.drop_watches(abrupt=False)
        response.read()  # to its end: the simulator logs a watch when it ends
    finally:
        response.release_conn()
    assert eventually(lambda: any(r.verb == "watch" for r in sim.requests()))
    (record,) = [r for r in sim.requests() if r.verb == "watch"]
    assert record.query == {
        "labelSelector": SELECTOR,
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "1",
        "resourceVersion": version,
    }


def test_no_client_method_is_named_by_a_string() -> None:
    """Every call is a typed method of the client (checked by mypy), never `getattr(api, name)`."""
    tree = ast.parse(inspect.getsource(gateway_module))
    calls = [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    assert "getattr" not in calls
    public = [name for name, _ in inspect.getmembers(ApiGateway) if not name.startswith("_")]
    assert {"create_pod", "delete_pod", "delete_pods", "list_pods", "watch_pods"} <= set(public)
    assert not {"request", "request_json", "request_bytes"} & set(public)
