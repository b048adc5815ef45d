"""ConfigMaps, Services, PersistentVolumeClaims and Secrets through the official client.

These are the requests real Spark makes (its executor ConfigMap, its driver Service in cluster
mode, and the deletes by label on exit), asserted here with the Python client so that the
server's answers are what a real API server gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from execpods.kubesim import KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, new_watch, pod_body
from tests.kubesim.support import raw

APP = {"spark-app-selector": "spark-1", "spark-role": "executor"}


def config_map(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}, **meta},
        "data": {"spark.properties": "spark.app.name=x\n"},
    }


def test_config_map_create_get_list_by_label_and_delete(sim: KubeSim, core: CoreApi) -> None:
    created = core.create_namespaced_config_map(NS, config_map("exec-conf", APP))
    assert created.metadata.uid
    assert created.metadata.resource_version
    assert created.metadata.namespace == NS
    core.create_namespaced_config_map(NS, config_map("other", {"spark-role": "driver"}))
    got = core.read_namespaced_config_map("exec-conf", NS)
    assert got.data == {"spark.properties": "spark.app.name=x\n"}
    listed = core.list_namespaced_config_map(NS, label_selector="spark-role=executor")
    assert [c.metadata.name for c in listed.items] == ["exec-conf"]
    assert listed.kind == "ConfigMapList"
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_config_map(NS, config_map("exec-conf"))
    assert dup.value.status == 409
    code, status = raw(sim, "DELETE", f"/api/v1/namespaces/{NS}/configmaps/exec-conf")
    assert (code, status["status"], status["details"]["name"]) == (200, "Success", "exec-conf")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("exec-conf", NS)
    assert gone.value.status == 404
    assert "configmaps" in str(gone.value.body)


def test_delete_collection_by_label_deletes_only_the_matches(sim: KubeSim, core: CoreApi) -> None:
    for i in range(3):
        core.create_namespaced_config_map(NS, config_map(f"mine-{i}", APP))
    core.create_namespaced_config_map(NS, config_map("theirs", {"spark-app-selector": "spark-2"}))
    core.delete_collection_namespaced_config_map(
        NS, label_selector="spark-app-selector=spark-1,spark-role=executor"
    )
    assert [c["metadata"]["name"] for c in sim.objects("configmaps")] == ["theirs"]


def test_invalid_names_and_labels_are_422(core: CoreApi) -> None:
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_config_map(NS, config_map("Not_A_Name"))
    assert bad.value.status == 422
    with pytest.raises(ApiException) as label:
        core.create_namespaced_config_map(NS, config_map("ok", {"bad key!": "v"}))
    assert label.value.status == 422
    service = {"metadata": {"name": "ends-with-dash-"}, "spec": {"ports": [{"port": 80}]}}
    with pytest.raises(ApiException) as svc:
        core.create_namespaced_service(NS, service)
    assert svc.value.status == 422


def test_service_gets_defaults_and_a_headless_one_keeps_no_ip(core: CoreApi) -> None:
    svc = core.create_namespaced_service(
        NS,
        {
            "metadata": {"name": "driver-svc", "labels": APP},
            "spec": {"selector": APP, "ports": [{"name": "driver-rpc-port", "port": 7078}]},
        },
    )
    assert svc.spec.type == "ClusterIP"
    assert svc.spec.cluster_ip.startswith("10.96.")
    assert svc.spec.ports[0].protocol == "TCP"
    assert svc.spec.ports[0].target_port == 7078
    headless = core.create_namespaced_service(
        NS,
        {"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}},
    )
    assert headless.spec.cluster_ip == "None"
    patched = core.patch_namespaced_service("driver-svc", NS, {"metadata": {"labels": {"x": "y"}}})
    assert patched.metadata.labels["x"] == "y"
    assert patched.spec.cluster_ip == svc.spec.cluster_ip
    assert int(patched.metadata.resource_version) > int(svc.metadata.resource_version)
    core.delete_collection_namespaced_service(NS, label_selector="spark-app-selector=spark-1")
    assert [s.metadata.name for s in core.list_namespaced_service(NS).items] == ["headless"]


def test_replace_with_a_stale_resource_version_is_a_conflict(core: CoreApi) -> None:
    first = core.create_namespaced_config_map(NS, config_map("cm"))
    body = config_map("cm")
    body["data"] = {"k": "v1"}
    body["metadata"]["resourceVersion"] = first.metadata.resource_version
    core.replace_namespaced_config_map("cm", NS, body)
    body["data"] = {"k": "v2"}
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_config_map("cm", NS, body)
    assert stale.value.status == 409
    assert core.read_namespaced_config_map("cm", NS).data == {"k": "v1"}


def test_owned_objects_and_pods_go_when_their_owner_pod_is_deleted(
    sim: KubeSim, core: CoreApi
) -> None:
    """Spark makes its executors and ConfigMap owned by the driver pod (cluster mode): deleting
    the driver must clean them up, as Kubernetes' garbage collector does."""
    driver = core.create_namespaced_pod(NS, pod_body("driver"))
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "driver",
        "uid": driver.metadata.uid,
        "controller": True,
    }
    core.create_namespaced_config_map(NS, config_map("owned", ownerReferences=[owner]))
    core.create_namespaced_config_map(NS, config_map("unowned"))
    executor = pod_body("exec-1")
    executor["metadata"]["ownerReferences"] = [owner]
    core.create_namespaced_pod(NS, executor)
    sim.run_until_idle()
    core.delete_namespaced_pod("driver", NS)
    sim.run_until_idle()
    assert [c["metadata"]["name"] for c in sim.objects("configmaps")] == ["unowned"]
    assert [p["metadata"]["name"] for p in sim.pods()] == []


def test_config_map_watch_over_http_sees_adds_and_deletes(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_config_map(NS, config_map("before", APP))
    w = new_watch()
    seen: list[tuple[str, str]] = []
    stream = w.stream(
        core.list_namespaced_config_map,
        NS,
        label_selector="spark-role=executor",
        timeout_seconds=5,
        _request_timeout=(5, 15),
    )
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            core.create_namespaced_config_map(NS, config_map("ignored"))
            core.create_namespaced_config_map(NS, config_map("after", APP))
            core.delete_namespaced_config_map("before", NS)
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "before"), ("ADDED", "after"), ("DELETED", "before")]


def test_discovery_lists_the_new_resources(sim: KubeSim) -> None:
    code, resources = raw(sim, "GET", "/api/v1")
    assert code == 200
    names = {r["name"] for r in resources["resources"]}
    assert {"pods", "configmaps", "services", "persistentvolumeclaims", "secrets"} <= names


def test_objects_of_an_unknown_plural_is_an_error(sim: KubeSim) -> None:
    with pytest.raises(ValueError, match="serves no"):
        sim.objects("deployments")
