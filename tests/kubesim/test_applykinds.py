"""What `kubectl apply -k` needs, through the official client: namespaces (cluster-scoped),
ServiceAccounts, RBAC Roles and RoleBindings under their group, and the discovery for them."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from execpods.kubesim import KubeSim
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException


def _plain(api: k8s.ApiClient, model: object) -> Any:
    """A model as the JSON the server sent (dicts and lists)."""
    return api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]


def _names(api: k8s.ApiClient, listed: object) -> set[str]:
    return {item["metadata"]["name"] for item in _plain(api, listed)["items"]}


def _clients(sim: KubeSim) -> tuple[k8s.CoreV1Api, k8s.RbacAuthorizationV1Api, k8s.ApiClient]:
    api = k8s.ApiClient(k8s.Configuration(host=sim.url))
    return k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api), api


def test_namespaces_are_created_listed_patched_and_deleted(sim: KubeSim) -> None:
    core, _, api = _clients(sim)
    names = _names(api, core.list_namespace())
    assert names == {"default", "kube-node-lease", "kube-public", "kube-system"}
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="spark")))
    with pytest.raises(ApiException) as exists:
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="spark")))
    assert exists.value.status == 409
    core.patch_namespace("spark", {"metadata": {"labels": {"team": "data"}}})
    spark = _plain(api, core.read_namespace("spark"))
    assert spark["metadata"]["labels"] == {"team": "data", "kubernetes.io/metadata.name": "spark"}
    assert spark["status"]["phase"] == "Active"
    core.delete_namespace("spark")
    assert "spark" not in _names(api, core.list_namespace())
    with pytest.raises(ApiException) as gone:
        core.delete_namespace("spark")
    assert gone.value.status == 404


def test_service_accounts_roles_and_bindings_are_served_under_their_groups(sim: KubeSim) -> None:
    core, rbac, api = _clients(sim)
    sim.create_namespace("spark")
    core.create_namespaced_service_account(
        "spark", k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="driver"))
    )
    rule = k8s.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])
    rbac.create_namespaced_role(
        "spark", k8s.V1Role(metadata=k8s.V1ObjectMeta(name="driver"), rules=[rule])
    )
    rbac.create_namespaced_role_binding(
        "spark",
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name="driver"),
            role_ref=k8s.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="driver"
            ),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name="driver", namespace="spark")],
        ),
    )
    role = _plain(api, rbac.read_namespaced_role("driver", "spark"))
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert role["rules"][0]["verbs"] == ["get", "list"]
    assert _names(api, rbac.list_namespaced_role_binding("spark")) == {"driver"}
    assert _names(api, core.list_namespaced_service_account("spark")) == {"driver"}
    # Roles are not core/v1 objects: the core path does not serve them.
    with pytest.raises(urllib.error.HTTPError) as wrong_group:
        urllib.request.urlopen(f"{sim.url}/api/v1/namespaces/spark/roles", timeout=10)
    assert wrong_group.value.code == 404
    groups = _plain(api, k8s.ApisApi(api).get_api_versions())["groups"]
    assert [g["name"] for g in groups] == ["networking.k8s.io", "rbac.authorization.k8s.io"]
    resources = {r["name"] for r in _plain(api, rbac.get_api_resources())["resources"]}
    assert resources == {"roles", "rolebindings"}
    core_resources = {r["name"] for r in _plain(api, core.get_api_resources())["resources"]}
    assert {"namespaces", "serviceaccounts", "secrets", "pods"} <= core_resources
    assert "roles" not in core_resources
