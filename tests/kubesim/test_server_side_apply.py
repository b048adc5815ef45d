"""Server-side apply on kubesim: what Spark 4.3 sends for a cluster-mode driver's Service and
ConfigMap (fabric8's `forceConflicts().serverSideApply()`), and the field-manager semantics
behind it, as kube-apiserver answers them (messages from its field manager's conflict error).

Each request is made over HTTP exactly as the client sends it: `PATCH` with
`Content-Type: application/apply-patch+yaml` and `?fieldManager=...&force=...`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from execpods.kubesim import KubeSim
from execpods.kubesim.apply import apply_config, owned_fields, to_fields_v1

from tests.kubesim.conftest import NS
from tests.kubesim.support import raw

APPLY = {"Content-Type": "application/apply-patch+yaml"}
CM = f"/api/v1/namespaces/{NS}/configmaps"
SVC = f"/api/v1/namespaces/{NS}/services"


def configmap(name: str, data: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": data,
    }


def managers(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


def test_sparks_apply_creates_the_object_and_a_second_one_changes_nothing(sim: KubeSim) -> None:
    """fabric8's request, as Spark 4.3's cluster-mode submission makes it: 201, then 200."""
    body = configmap("spark-drv-conf-map", {"spark.properties": "a=b"}, labels={"app": "x"})
    code, created = raw(
        sim, "PATCH", f"{CM}/spark-drv-conf-map?fieldManager=fabric8&force=true", body, **APPLY
    )
    assert code == 201, created
    assert created["metadata"]["uid"]
    assert created["metadata"]["namespace"] == NS
    assert managers(created) == {
        ("fabric8", "Apply"): {
            "f:data": {"f:spark.properties": {}},
            "f:metadata": {"f:labels": {"f:app": {}}},
        }
    }
    code, again = raw(
        sim, "PATCH", f"{CM}/spark-drv-conf-map?fieldManager=fabric8&force=true", body, **APPLY
    )
    assert code == 200
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    code, got = raw(sim, "GET", f"{CM}/spark-drv-conf-map")
    assert got["data"] == {"spark.properties": "a=b"}


def test_a_yaml_body_is_accepted(sim: KubeSim) -> None:
    """kubectl sends the configuration as YAML (JSON is the same media type, as YAML)."""
    import http.client

    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  k: v\n"
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    conn.request("PATCH", f"{CM}/y?fieldManager=kubectl", body=text, headers=APPLY)
    response = conn.getresponse()
    assert response.status == 201, response.read()
    conn.close()


def test_an_apply_needs_a_field_manager_and_a_matching_kind_and_name(sim: KubeSim) -> None:
    code, status = raw(sim, "PATCH", f"{CM}/c", configmap("c", {}), **APPLY)
    assert code == 400
    assert "fieldManager is required" in status["message"]
    code, status = raw(sim, "PATCH", f"{CM}/c?fieldManager=m", configmap("other", {}), **APPLY)
    assert code == 400
    assert "does not match the name on the URL" in status["message"]
    wrong = {**configmap("c", {}), "kind": "Secret"}
    code, status = raw(sim, "PATCH", f"{CM}/c?fieldManager=m", wrong, **APPLY)
    assert code == 400
    assert "ConfigMap v1" in status["message"]


def test_applying_a_field_another_manager_set_is_a_conflict_unless_forced(sim: KubeSim) -> None:
    code, _ = raw(
        sim, "POST", f"{CM}?fieldManager=kubectl-create", configmap("c", {"k": "1", "o": "x"})
    )
    assert code == 201
    code, status = raw(
        sim, "PATCH", f"{CM}/c?fieldManager=fabric8", configmap("c", {"k": "2"}), **APPLY
    )
    assert code == 409, status
    assert status["reason"] == "Conflict"
    assert re.fullmatch(
        r'Apply failed with 1 conflict: conflict with "kubectl-create" using v1 at \S+Z: \.data\.k',
        status["message"],
    ), status["message"]
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": status["details"]["causes"][0]["message"],
            "field": ".data.k",
        }
    ]
    # The same value is no conflict: the field becomes shared.
    code, shared = raw(
        sim, "PATCH", f"{CM}/c?fieldManager=fabric8", configmap("c", {"k": "1"}), **APPLY
    )
    assert code == 200, shared
    # Forced: the value changes and the field moves to the applier.
    code, forced = raw(
        sim, "PATCH", f"{CM}/c?fieldManager=fabric8&force=true", configmap("c", {"k": "2"}), **APPLY
    )
    assert code == 200, forced
    assert forced["data"] == {"k": "2", "o": "x"}
    owners = managers(forced)
    assert owners[("fabric8", "Apply")] == {"f:data": {"f:k": {}}}
    assert owners[("kubectl-create", "Update")] == {"f:data": {"f:o": {}}}


def test_a_field_no_longer_applied_is_removed_unless_another_manager_owns_it(sim: KubeSim) -> None:
    path = f"{CM}/c?fieldManager=a"
    raw(sim, "PATCH", path, configmap("c", {"x": "1", "y": "2", "z": "3"}), **APPLY)
    # Manager b applies z with the same value: now shared.
    raw(sim, "PATCH", f"{CM}/c?fieldManager=b", configmap("c", {"z": "3"}), **APPLY)
    code, after = raw(sim, "PATCH", path, configmap("c", {"x": "1"}), **APPLY)
    assert code == 200
    assert after["data"] == {"x": "1", "z": "3"}  # y was a's alone; z is still b's


def test_an_update_takes_fields_over_without_conflict(sim: KubeSim) -> None:
    raw(sim, "PATCH", f"{CM}/c?fieldManager=fabric8", configmap("c", {"k": "1"}), **APPLY)
    merge = {"Content-Type": "application/merge-patch+json"}
    code, patched = raw(sim, "PATCH", f"{CM}/c?fieldManager=editor", {"data": {"k": "9"}}, **merge)
    assert code == 200
    owners = managers(patched)
    assert ("fabric8", "Apply") not in owners  # its only field was taken over
    assert owners[("editor", "Update")] == {"f:data": {"f:k": {}}}
    # Without fieldManager, the manager is the User-Agent's product name.
    code, again = raw(
        sim, "PATCH", f"{CM}/c", {"data": {"k": "8"}}, **merge, **{"User-Agent": "Spark/4.3 (x)"}
    )
    assert ("Spark", "Update") in managers(again)


def test_service_ports_merge_by_port_and_protocol(sim: KubeSim) -> None:
    """A headless driver Service as Spark builds it; another manager adds a port; Spark's next
    apply keeps it, and drops only the port Spark itself stopped applying."""

    def service(*ports: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "drv-svc"},
            "spec": {
                "clusterIP": "None",
                "selector": {"spark-role": "driver"},
                "ports": [{"name": f"p{p}", "port": p, "targetPort": p} for p in ports],
            },
        }

    code, created = raw(
        sim, "PATCH", f"{SVC}/drv-svc?fieldManager=fabric8&force=true", service(7078, 7079), **APPLY
    )
    assert code == 201, created
    assert created["spec"]["clusterIP"] == "None"
    ports_owned = managers(created)[("fabric8", "Apply")]["f:spec"]["f:ports"]
    assert set(ports_owned) == {
        'k:{"port":7078,"protocol":"TCP"}',
        'k:{"port":7079,"protocol":"TCP"}',
    }
    raw(
        sim,
        "PATCH",
        f"{SVC}/drv-svc?fieldManager=ui",
        {**service(4040), "spec": {"ports": service(4040)["spec"]["ports"]}},
        **APPLY,
    )
    code, after = raw(
        sim, "PATCH", f"{SVC}/drv-svc?fieldManager=fabric8&force=true", service(7078), **APPLY
    )
    assert code == 200, after
    assert sorted(p["port"] for p in after["spec"]["ports"]) == [4040, 7078]


def test_owned_fields_and_fields_v1_follow_the_api_servers_shape() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "s",
            "labels": {"a": "b"},
            "ownerReferences": [{"uid": "u1", "name": "d"}],
        },
        "spec": {"ports": [{"port": 80, "name": "http"}], "selector": {"x": "y"}},
        "status": {"loadBalancer": {}},
    }
    assert to_fields_v1(owned_fields(obj)) == {
        "f:metadata": {
            "f:labels": {"f:a": {}},
            "f:ownerReferences": {'k:{"uid":"u1"}': {".": {}, "f:name": {}, "f:uid": {}}},
        },
        "f:spec": {
            "f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:name": {}, "f:port": {}}},
            "f:selector": {"f:x": {}},
        },
    }


@pytest.mark.parametrize("force", [False, True])
def test_reapplying_ones_own_fields_never_conflicts(force: bool) -> None:
    first = apply_config(
        None, configmap("c", {"k": "1"}), manager="m", force=False, api_version="v1", now="t"
    )
    second = apply_config(
        first, configmap("c", {"k": "2"}), manager="m", force=force, api_version="v1", now="t"
    )
    assert second["data"] == {"k": "2"}
