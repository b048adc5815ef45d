"""PersistentVolumeClaims, delete answers, node affinity and bad nodes, through the official client.

Spark's OnDemand claims are created after their executor's pod, owned by the driver pod, deleted
by label on exit; the official client parses each answer into the kind's model, so a server that
answers a delete with the wrong body breaks it (a `Status` where the deleted object is due).
"""

from __future__ import annotations

from typing import Any

import pytest
from execpods.kubesim import KubeSim
from execpods.kubesim.claims import WAIT_FOR_FIRST_CONSUMER_CLASS
from execpods.kubesim.objects import KINDS, Kind

from tests.kubesim.conftest import NS, ClientApi, CoreApi, new_watch, pod_body
from tests.kubesim.support import raw

APP = {"spark-app-selector": "spark-1"}


def claim(name: str, storage_class: str = "standard", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": dict(APP), **meta},
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOncePod"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def pod_with_claim(name: str, claim_name: str) -> dict[str, Any]:
    body = pod_body(name)
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return body


def test_every_kind_answers_a_delete_as_the_api_server(sim: KubeSim, core: CoreApi) -> None:
    """Pods, Services and claims answer the deleted object (ReturnDeletedObject in their
    registries), which the client parses into the kind's model; ConfigMaps and Secrets a Success
    Status, which the client (whose answer type there is `object`) hands back as a mapping."""
    core.create_namespaced_pod(NS, pod_body("p"))
    core.create_namespaced_service(
        NS, {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}
    )
    core.create_namespaced_persistent_volume_claim(NS, claim("pvc"))
    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    pod: Any = core.delete_namespaced_pod("p", NS)
    assert type(pod).__name__ == "V1Pod"
    assert pod.metadata.name == "p"
    svc: Any = core.delete_namespaced_service("svc", NS)
    assert type(svc).__name__ == "V1Service"
    assert svc.spec.cluster_ip
    pvc: Any = core.delete_namespaced_persistent_volume_claim("pvc", NS)
    assert type(pvc).__name__ == "V1PersistentVolumeClaim"
    assert pvc.status.phase == "Bound"
    for deleted in (
        core.delete_namespaced_config_map("cm", NS),
        core.delete_namespaced_secret("s", NS),
    ):
        assert (deleted["kind"], deleted["status"]) == ("Status", "Success")
    assert sim.objects("persistentvolumeclaims") == []
    assert sim.objects("services") == []


def test_an_immediate_claim_is_bound_at_once_and_listed_watched_and_deleted(
    sim: KubeSim, core: CoreApi
) -> None:
    created = core.create_namespaced_persistent_volume_claim(NS, claim("data-0"))
    assert created.status.phase == "Bound"
    assert created.status.capacity == {"storage": "1Gi"}
    assert created.spec.volume_name
    got = core.read_namespaced_persistent_volume_claim("data-0", NS)
    assert got.metadata.uid == created.metadata.uid
    listed = core.list_namespaced_persistent_volume_claim(
        NS, label_selector="spark-app-selector=spark-1"
    )
    assert [c.metadata.name for c in listed.items] == ["data-0"]
    events = []
    stream: Any = new_watch().stream(
        core.list_namespaced_persistent_volume_claim,
        NS,
        resource_version=created.metadata.resource_version,
        timeout_seconds=1,
    )
    core.delete_collection_namespaced_persistent_volume_claim(
        NS, label_selector="spark-app-selector=spark-1"
    )
    for event in stream:
        events.append((event["type"], event["object"].metadata.name))
    assert events == [("DELETED", "data-0")]


def test_a_wait_for_first_consumer_claim_binds_when_its_pod_is_scheduled(
    sim: KubeSim, core: CoreApi
) -> None:
    pending = core.create_namespaced_persistent_volume_claim(
        NS, claim("late", WAIT_FOR_FIRST_CONSUMER_CLASS)
    )
    assert pending.status.phase == "Pending"
    sim.run_until_idle()
    assert core.read_namespaced_persistent_volume_claim("late", NS).status.phase == "Pending"
    core.create_namespaced_pod(NS, pod_with_claim("user", "late"))
    sim.run_until_idle()
    pod = core.read_namespaced_pod("user", NS)
    bound = core.read_namespaced_persistent_volume_claim("late", NS)
    assert bound.status.phase == "Bound"
    assert bound.metadata.annotations["volume.kubernetes.io/selected-node"] == pod.spec.node_name


def test_a_pod_naming_a_missing_claim_waits_for_it(sim: KubeSim, core: CoreApi) -> None:
    """Spark creates the executor pod first, then its claim: the pod is Unschedulable meanwhile."""
    core.create_namespaced_pod(NS, pod_with_claim("exec-1", "exec-1-pvc-0"))
    sim.run_until_idle()
    waiting = core.read_namespaced_pod("exec-1", NS)
    assert waiting.spec.node_name is None
    scheduled = [c for c in waiting.status.conditions if c.type == "PodScheduled"]
    assert scheduled[0].reason == "Unschedulable"
    assert 'persistentvolumeclaim "exec-1-pvc-0" not found' in scheduled[0].message
    core.create_namespaced_persistent_volume_claim(NS, claim("exec-1-pvc-0"))
    sim.run_until_idle()
    assert core.read_namespaced_pod("exec-1", NS).status.phase == "Running"


def test_claims_owned_by_a_pod_go_with_it(sim: KubeSim, core: CoreApi) -> None:
    driver = core.create_namespaced_pod(NS, pod_body("driver"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": driver.metadata.uid}
    core.create_namespaced_persistent_volume_claim(NS, claim("owned", ownerReferences=[owner]))
    core.create_namespaced_persistent_volume_claim(NS, claim("free"))
    sim.run_until_idle()
    core.delete_namespaced_pod("driver", NS)
    sim.run_until_idle()
    assert [c["metadata"]["name"] for c in sim.objects("persistentvolumeclaims")] == ["free"]


def test_required_node_affinity_and_a_bad_node(sim: KubeSim, core: CoreApi) -> None:
    nodes = [n.name for n in sim.nodes()]
    avoid = pod_body("avoids")
    avoid["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": [nodes[0]],
                            }
                        ]
                    }
                ]
            }
        }
    }
    sim.crash_pods_on(nodes[0])
    core.create_namespaced_pod(NS, pod_body("lands-anywhere"))  # the least loaded: nodes[0]
    core.create_namespaced_pod(NS, avoid)
    sim.run_until_idle()
    crashed = core.read_namespaced_pod("lands-anywhere", NS)
    assert crashed.spec.node_name == nodes[0]
    assert crashed.status.phase == "Failed"
    assert crashed.status.container_statuses[0].state.terminated.exit_code == 1
    placed = core.read_namespaced_pod("avoids", NS)
    assert (placed.spec.node_name, placed.status.phase) == (nodes[1], "Running")


# What the real API server answers to a DELETE, by resource: the deleted object where the
# resource's registry sets ReturnDeletedObject (or, for namespaces, returns the object from its
# own Delete), a Status otherwise. A kind kubesim serves that is missing here fails the test
# below: whoever adds a kind decides its answer.
DELETE_ANSWERS = {
    "pods": "object",
    "services": "object",
    "persistentvolumeclaims": "object",
    "namespaces": "object",
    "configmaps": "Status",
    "secrets": "Status",
    "resourcequotas": "Status",  # ReturnDeletedObject is gone from its registry (1.27+)
    "events": "Status",
    "serviceaccounts": "Status",
    "roles": "Status",
    "rolebindings": "Status",
}


@pytest.mark.parametrize("kind", [k for k in KINDS if not getattr(k, "group", "")], ids=str)
def test_each_core_kind_answers_a_delete_as_its_registry(
    sim: KubeSim, api_client: ClientApi, kind: Kind
) -> None:
    """Every namespaced core/v1 kind kubesim serves, deleted through the official client's
    ApiClient: the answer's kind is the object's where the API server returns the object."""
    assert kind.plural in DELETE_ANSWERS, f"decide what a delete of {kind.plural} answers"
    body: dict[str, Any] = {"metadata": {"name": "to-delete"}}
    if kind.plural == "services":
        body["spec"] = {"ports": [{"port": 80}]}
    if kind.plural == "events":
        body["involvedObject"] = {"kind": "Pod", "name": "p", "namespace": NS}
    code, _ = raw(sim, "POST", f"/api/v1/namespaces/{NS}/{kind.plural}", body)
    assert code == 201
    method, url, headers, payload, _ = api_client.param_serialize(
        "DELETE",
        f"/api/v1/namespaces/{NS}/{kind.plural}/to-delete",
        header_params={"Accept": "application/json", "Content-Type": "application/json"},
        body={},
    )
    response = api_client.call_api(method, url, header_params=headers, body=payload)
    response.read()
    assert response.status == 200
    answer = api_client.response_deserialize(response, {"200": "object"}).data
    expected = kind.kind if DELETE_ANSWERS[kind.plural] == "object" else "Status"
    assert answer["kind"] == expected
    if expected == "Status":
        assert answer["status"] == "Success"
    else:
        assert answer["metadata"]["name"] == "to-delete"
