"""RBAC enforcement from deploy/rbac.yaml: a token maps to a service account, and a request its
Role does not allow gets kube-apiserver's 403 Status. The official client against the simulator."""

from __future__ import annotations

import contextlib
import copy
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from execpods.kubesim import KubeSim
from execpods.kubesim.rbac import Authorizer, RequestAttributes, User, request_attributes
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import ClientApi, CoreApi, core_api, new_watch, pod_body
from tests.kubesim.support import http_json, raw, status_of
from tests.kubesim.test_control import cli

RBAC_YAML = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
SA = "system:serviceaccount:spark:execpods-sidecar"
GRANTED = ("create", "get", "list", "watch", "delete", "deletecollection", "patch")


def manifests() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC_YAML.read_text()) if d]


@contextlib.contextmanager
def core_with_token(sim: KubeSim, token: str | None) -> Iterator[CoreApi]:
    cfg = client.Configuration(host=sim.url)
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    api_client: ClientApi = client.ApiClient(cfg)
    try:
        yield core_api(api_client)
    finally:
        api_client.close()


@pytest.fixture
def rbac_sim() -> Iterator[KubeSim]:
    with KubeSim(deterministic=True, rbac=manifests(), namespaces=["spark"]) as sim:
        yield sim


def _forbidden(exc: ApiException) -> tuple[int, str, str, dict[str, Any]]:
    status = status_of(exc)
    return exc.status, status["reason"], status["message"], status["details"]


def test_the_deployed_role_allows_every_verb_the_sidecar_uses(rbac_sim: KubeSim) -> None:
    token = rbac_sim.token_for("execpods-sidecar", "spark")
    with core_with_token(rbac_sim, token) as core:
        core.create_namespaced_pod("spark", pod_body("e1", labels={"spark-exec-id": "1"}))
        core.create_namespaced_pod("spark", pod_body("e2", labels={"spark-exec-id": "2"}))
        assert core.read_namespaced_pod("e1", "spark").metadata.name == "e1"
        listed = core.list_namespaced_pod("spark")
        assert [p.metadata.name for p in listed.items] == ["e1", "e2"]
        events = list(
            new_watch().stream(
                core.list_namespaced_pod,
                "spark",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=1,
                _request_timeout=(5, 11),
            )
        )
        assert events == []  # the watch was allowed (and nothing happened)
        core.patch_namespaced_pod("e1", "spark", {"metadata": {"labels": {"x": "y"}}})
        core.delete_namespaced_pod("e1", "spark")
        core.delete_collection_namespaced_pod("spark", label_selector="spark-exec-id")
    assert rbac_sim.pods("spark") == []


def test_requests_outside_the_role_get_kube_apiservers_403(rbac_sim: KubeSim) -> None:
    rbac_sim.create_pod(pod_body("p"), "spark")
    token = rbac_sim.token_for("execpods-sidecar", "spark")
    with core_with_token(rbac_sim, token) as core:
        with pytest.raises(ApiException) as exc:
            core.list_namespaced_pod("default")
        assert _forbidden(exc.value) == (
            403,
            "Forbidden",
            f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" in '
            'the namespace "default"',
            {"kind": "pods"},
        )
        with pytest.raises(ApiException) as exc:
            core.patch_namespaced_pod_status("p", "spark", {"status": {"phase": "Failed"}})
        assert _forbidden(exc.value) == (
            403,
            "Forbidden",
            f'pods "p" is forbidden: User "{SA}" cannot patch resource "pods/status" in API '
            'group "" in the namespace "spark"',
            {"kind": "pods", "name": "p"},
        )
        with pytest.raises(ApiException) as exc:
            core.replace_namespaced_pod("p", "spark", rbac_sim.pod("p", "spark"))
        assert 'cannot update resource "pods"' in _forbidden(exc.value)[2]
        with pytest.raises(ApiException) as exc:
            core.list_pod_for_all_namespaces(watch=True, timeout_seconds=1, _preload_content=False)
        assert _forbidden(exc.value)[2] == (
            f'pods is forbidden: User "{SA}" cannot watch resource "pods" in API group "" at '
            "the cluster scope"
        )
        with pytest.raises(ApiException) as exc:
            core.read_namespace("spark")
        assert _forbidden(exc.value)[:3] == (
            403,
            "Forbidden",
            f'namespaces "spark" is forbidden: User "{SA}" cannot get resource "namespaces" in '
            'API group "" in the namespace "spark"',
        )
    assert rbac_sim.pod("p", "spark") is not None  # nothing refused changed anything


def test_unknown_tokens_are_401_and_no_token_is_anonymous(rbac_sim: KubeSim) -> None:
    with core_with_token(rbac_sim, "forged") as core, pytest.raises(ApiException) as exc:
        core.list_namespaced_pod("spark")
    assert (exc.value.status, status_of(exc.value)["reason"]) == (401, "Unauthorized")
    with core_with_token(rbac_sim, None) as core, pytest.raises(ApiException) as exc:
        core.list_namespaced_pod("spark")
    assert 'User "system:anonymous" cannot list' in status_of(exc.value)["message"]
    # Discovery stays open, as the API server grants it to everyone.
    assert raw(rbac_sim, "GET", "/version")[0] == 200


def test_the_admin_kubeconfig_and_in_process_calls_are_never_refused(rbac_sim: KubeSim) -> None:
    loader: Any = config.new_client_from_config
    api_client = loader(config_file=str(rbac_sim.kubeconfig_path))
    try:
        core = core_api(api_client)
        core.create_namespace({"metadata": {"name": "elsewhere"}})
        core.create_namespaced_pod("elsewhere", pod_body("admin-made"))
        assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["admin-made"]
    finally:
        api_client.close()
    rbac_sim.delete_pod("admin-made", "elsewhere")


def test_rbac_is_off_by_default_and_can_be_turned_off(sim: KubeSim) -> None:
    assert raw(sim, "GET", "/api/v1/namespaces/x/pods")[0] == 200  # no token at all
    sim.enable_rbac(manifests())
    assert raw(sim, "GET", "/api/v1/namespaces/x/pods")[0] == 403
    sim.disable_rbac()
    assert raw(sim, "GET", "/api/v1/namespaces/x/pods")[0] == 200


def test_a_role_missing_a_verb_refuses_exactly_that_verb() -> None:
    docs = manifests()
    role = next(d for d in docs if d["kind"] == "Role")
    role["rules"][0]["verbs"].remove("deletecollection")
    with KubeSim(deterministic=True, rbac=docs, namespaces=["spark"]) as sim:
        token = sim.token_for("execpods-sidecar", "spark")
        with core_with_token(sim, token) as core:
            core.create_namespaced_pod("spark", pod_body("p"))
            core.delete_namespaced_pod("p", "spark")
            with pytest.raises(ApiException) as exc:
                core.delete_collection_namespaced_pod("spark")
        assert "cannot deletecollection resource" in status_of(exc.value)["message"]


def test_control_endpoint_and_cli_load_the_manifests(sim: KubeSim, tmp_path: Path) -> None:
    code, _ = raw(sim, "POST", "/_kubesim/rbac/enable", {"manifests": manifests()})
    assert code == 200
    code, body = raw(
        sim, "POST", "/_kubesim/rbac/tokens", {"namespace": "spark", "name": "execpods-sidecar"}
    )
    assert code == 200
    auth = {"Authorization": f"Bearer {body['token']}"}
    assert raw(sim, "GET", "/api/v1/namespaces/spark/pods", **auth)[0] == 200
    assert raw(sim, "GET", "/api/v1/namespaces/default/pods", **auth)[0] == 403
    assert raw(sim, "GET", "/_kubesim/state")[1]["rbac"] is True
    token_flag = "spark/execpods-sidecar=s3cret"
    flags = ("--rbac", str(RBAC_YAML), "--sa-token", token_flag, "--namespace", "spark")
    with cli(tmp_path / "kc", *flags) as (proc, url):
        port = int(url.rsplit(":", 1)[1])
        auth = {"Authorization": "Bearer s3cret"}
        path = "/api/v1/namespaces/spark/pods"
        assert http_json("127.0.0.1", port, "POST", path, pod_body("p"), **auth)[0] == 201
        code, status = http_json("127.0.0.1", port, "GET", "/api/v1/namespaces/x/pods", **auth)
        assert (code, status["reason"]) == (403, "Forbidden")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


# -- the authoriser's rules, beyond the deployed Role -----------------------------------------


def _user(name: str, *groups: str) -> User:
    return User(name=name, groups=frozenset(groups))


def test_cluster_roles_groups_resource_names_and_subresource_wildcards() -> None:
    auth = Authorizer()
    auth.enable(
        [
            {
                "kind": "ClusterRole",
                "metadata": {"name": "status-writer"},
                "rules": [{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]}],
            },
            {
                "kind": "RoleBinding",
                "metadata": {"name": "b1", "namespace": "a"},
                "roleRef": {"kind": "ClusterRole", "name": "status-writer"},
                "subjects": [{"kind": "Group", "name": "writers"}],
            },
            {
                "kind": "Role",
                "metadata": {"name": "one-pod", "namespace": "a"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods"],
                        "resourceNames": ["p1"],
                        "verbs": ["get"],
                    }
                ],
            },
            {
                "kind": "RoleBinding",
                "metadata": {"name": "b2", "namespace": "a"},
                "roleRef": {"kind": "Role", "name": "one-pod"},
                "subjects": [{"kind": "User", "name": "alice"}],
            },
            {
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "b3"},
                "roleRef": {"kind": "ClusterRole", "name": "status-writer"},
                "subjects": [{"kind": "ServiceAccount", "name": "ops", "namespace": "x"}],
            },
        ]
    )
    writer = _user("bob", "writers")
    status = RequestAttributes(verb="patch", resource="pods", subresource="status", namespace="a")
    assert auth.allowed(writer, status)
    assert not auth.allowed(writer, RequestAttributes(verb="patch", resource="pods", namespace="a"))
    assert not auth.allowed(
        writer,
        RequestAttributes(verb="patch", resource="pods", subresource="status", namespace="b"),
    )
    alice = _user("alice")
    assert auth.allowed(
        alice, RequestAttributes(verb="get", resource="pods", namespace="a", name="p1")
    )
    assert not auth.allowed(
        alice, RequestAttributes(verb="get", resource="pods", namespace="a", name="p2")
    )
    assert not auth.allowed(alice, RequestAttributes(verb="list", resource="pods", namespace="a"))
    ops = _user("system:serviceaccount:x:ops")
    assert auth.allowed(
        ops, RequestAttributes(verb="patch", resource="pods", subresource="status", namespace="z")
    )
    with pytest.raises(ValueError, match="unsupported kind"):
        auth.enable([{"kind": "Secret", "metadata": {"name": "s"}}])


def test_request_attributes_follow_kube_apiservers_request_info() -> None:
    def verb_of(method: str, path: str, **query: str) -> tuple[str, str, str, str, str]:
        req = request_attributes(method, path, query)
        assert req is not None
        return req.verb, req.resource, req.subresource, req.namespace, req.name

    assert verb_of("GET", "/api/v1/namespaces/n/pods") == ("list", "pods", "", "n", "")
    assert verb_of("GET", "/api/v1/namespaces/n/pods", watch="1") == ("watch", "pods", "", "n", "")
    assert verb_of("GET", "/api/v1/watch/namespaces/n/pods/p") == ("watch", "pods", "", "n", "p")
    assert verb_of("GET", "/api/v1/pods") == ("list", "pods", "", "", "")
    assert verb_of("DELETE", "/api/v1/namespaces/n/pods") == (
        "deletecollection",
        "pods",
        "",
        "n",
        "",
    )
    assert verb_of("PUT", "/api/v1/namespaces/n/pods/p/status") == (
        "update",
        "pods",
        "status",
        "n",
        "p",
    )
    assert verb_of("GET", "/api/v1/namespaces/n/configmaps/c") == (
        "get",
        "configmaps",
        "",
        "n",
        "c",
    )
    assert request_attributes("GET", "/version", {}) is None


NAMESPACES = ("spark", "default", "other")
VERBS = (*GRANTED, "update")


@settings(max_examples=200, deadline=None)
@given(
    verb=st.sampled_from(VERBS),
    namespace=st.sampled_from(NAMESPACES),
    subresource=st.sampled_from(("", "status", "log")),
    holder=st.sampled_from(("execpods-sidecar", "someone-else")),
    holder_ns=st.sampled_from(NAMESPACES),
)
def test_the_deployed_role_grants_exactly_its_verbs_on_pods_in_its_namespace(
    verb: str, namespace: str, subresource: str, holder: str, holder_ns: str
) -> None:
    auth = Authorizer()
    auth.enable(copy.deepcopy(manifests()))
    user = _user(f"system:serviceaccount:{holder_ns}:{holder}", "system:serviceaccounts")
    req = RequestAttributes(
        verb=verb, resource="pods", subresource=subresource, namespace=namespace
    )
    expected = (
        holder == "execpods-sidecar"
        and holder_ns == "spark"
        and namespace == "spark"
        and verb in GRANTED
        and subresource == ""
    )
    assert auth.allowed(user, req) is expected


def test_the_cli_refuses_unreadable_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from execpods.kubesim.cli import main as cli_main

    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    secret = tmp_path / "secret.yaml"
    secret.write_text("kind: Secret\nmetadata: {name: s}\n")
    for argv in (
        ["--rbac", str(bad)],
        ["--rbac", str(secret)],
        ["--rbac", str(tmp_path / "missing.yaml")],
        ["--sa-token", "no-slash=tok"],
    ):
        with pytest.raises(SystemExit) as exc:
            cli_main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err
    assert "NAMESPACE/NAME=TOKEN" in err
    assert "unsupported kind 'Secret'" in err
