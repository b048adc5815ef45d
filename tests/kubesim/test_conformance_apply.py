"""Server-side apply, conformance: what Spark 4.3 sends for a cluster-mode driver's Service,
ConfigMap and NetworkPolicy (fabric8's `forceConflicts().serverSideApply()`), and the
field-manager semantics behind it, run against kubesim and against the real kube-apiserver of the
project's real-server tier (``[real]``, docs/kubesim.md's fidelity table); the expected answers
are the real server's (v1.36: codes, wording, managedFields).

Each request is made over HTTP as the clients send it: `PATCH` with
`Content-Type: application/apply-patch+yaml` and `?fieldManager=...&force=...`.
"""

from __future__ import annotations

import contextlib
import http.client
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from execpods.kubesim import KubeSim
from execpods.kubesim.apply import apply_config, owned_fields, to_fields_v1

from tests.sidecar.conftest import FAST_CLUSTER

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
NS = "ssa"
CM = f"/api/v1/namespaces/{NS}/configmaps"
SVC = f"/api/v1/namespaces/{NS}/services"
NP = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"


@dataclass
class Server:
    """An API server reached over HTTP(S) with a bearer token."""

    url: str
    token: str = ""
    context: ssl.SSLContext | None = None
    sim: KubeSim | None = None

    @contextlib.contextmanager
    def as_account(self, name: str, rules: list[dict[str, Any]]) -> Iterator[Server]:
        """This server as a service account bound to a Role with `rules` (RBAC enforced)."""
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": NS},
        }
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": NS},
            "rules": rules,
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}],
        }
        if self.sim is not None:
            self.sim.enable_rbac([account, role, binding])
            try:
                yield Server(self.url, self.sim.token_for(name, NS))
            finally:
                self.sim.disable_rbac()
            return
        self("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", account)
        self("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles", role)
        self("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", binding)
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        code, issued = self(
            "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{name}/token", request
        )
        assert code == 201, issued
        yield Server(self.url, issued["status"]["token"], self.context)

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = "application/json",
        **headers: str,
    ) -> tuple[int, Any]:
        parts = urlsplit(self.url)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, context=self.context, timeout=30
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        sent = {"Content-Type": ctype, **headers}
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(
                method, path, body=None if body is None else orjson.dumps(body), headers=sent
            )
            response = conn.getresponse()
            text = response.read()
            return response.status, orjson.loads(text) if text else None
        finally:
            conn.close()


@contextlib.contextmanager
def _kubesim() -> Iterator[Server]:
    with KubeSim(cluster=FAST_CLUSTER) as sim:
        server = Server(sim.url, sim=sim)
        server("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        yield server


@pytest.fixture(scope="module", params=["kubesim", "real"])
def api(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The module's server: kubesim, or the session's real kube-apiserver (tests/conftest.py:
    skipped when it is not built, failed when the check requires it)."""
    if request.param == "kubesim":
        with _kubesim() as server:
            yield server
        return
    real = request.getfixturevalue("real_server")
    server = Server(real.url, real.token, real.ssl_context())
    code, answer = server("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    assert code in (201, 409), answer
    yield server


def configmap(name: str, data: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": data,
    }


def managers(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


def test_sparks_apply_creates_the_object_and_a_second_one_changes_nothing(api: Server) -> None:
    """fabric8's request, as Spark 4.3's cluster-mode submission makes it: 201, then 200."""
    body = configmap("spark-drv-conf-map", {"spark.properties": "a=b"}, labels={"app": "x"})
    path = f"{CM}/spark-drv-conf-map?fieldManager=fabric8&force=true"
    code, created = api("PATCH", path, body, APPLY)
    assert code == 201, created
    assert created["metadata"]["namespace"] == NS
    assert managers(created) == {
        ("fabric8", "Apply"): {
            "f:data": {"f:spark.properties": {}},
            "f:metadata": {"f:labels": {"f:app": {}}},
        }
    }
    code, again = api("PATCH", path, body, APPLY)
    assert code == 200
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    code, got = api("GET", f"{CM}/spark-drv-conf-map")
    assert got["data"] == {"spark.properties": "a=b"}


def test_an_apply_needs_a_field_manager_and_a_matching_kind_and_name(api: Server) -> None:
    code, status = api("PATCH", f"{CM}/c", configmap("c", {}), APPLY)
    assert code == 422
    assert status["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )
    code, status = api("PATCH", f"{CM}/c?fieldManager=m", configmap("other", {}), APPLY)
    assert code == 400
    assert (
        status["message"] == "the name of the object (other) does not match the name on the URL (c)"
    )
    code, status = api(
        "PATCH", f"{CM}/c?fieldManager=m", {**configmap("c", {}), "kind": "Secret"}, APPLY
    )
    assert code == 400
    assert status["message"] == "invalid object type: /v1, Kind=Secret"


def test_applying_a_field_another_manager_set_is_a_conflict_unless_forced(api: Server) -> None:
    code, _ = api("POST", f"{CM}?fieldManager=kubectl-create", configmap("k", {"k": "1", "o": "x"}))
    assert code == 201
    code, status = api("PATCH", f"{CM}/k?fieldManager=fabric8", configmap("k", {"k": "2"}), APPLY)
    assert code == 409, status
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.k'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kubectl-create" using v1',
            "field": ".data.k",
        }
    ]
    code, forced = api(
        "PATCH", f"{CM}/k?fieldManager=fabric8&force=true", configmap("k", {"k": "2"}), APPLY
    )
    assert code == 200, forced
    assert forced["data"] == {"k": "2", "o": "x"}
    owners = managers(forced)
    assert owners[("fabric8", "Apply")] == {"f:data": {"f:k": {}}}
    # The creator still owns what it alone set, and the map it created.
    assert owners[("kubectl-create", "Update")] == {"f:data": {".": {}, "f:o": {}}}


def test_a_field_no_longer_applied_is_removed_unless_another_manager_owns_it(api: Server) -> None:
    api("PATCH", f"{CM}/r?fieldManager=a", configmap("r", {"x": "1", "y": "2", "z": "3"}), APPLY)
    api("PATCH", f"{CM}/r?fieldManager=b", configmap("r", {"z": "3"}), APPLY)  # shared: same value
    code, after = api("PATCH", f"{CM}/r?fieldManager=a", configmap("r", {"x": "1"}), APPLY)
    assert code == 200
    assert after["data"] == {"x": "1", "z": "3"}  # y was a's alone; z is still b's


def test_an_update_takes_fields_over_without_conflict(api: Server) -> None:
    api("PATCH", f"{CM}/t?fieldManager=fabric8", configmap("t", {"k": "1"}), APPLY)
    code, patched = api("PATCH", f"{CM}/t?fieldManager=editor", {"data": {"k": "9"}}, MERGE)
    assert code == 200
    # fabric8's only field was taken over, so its entry goes.
    assert [(e["manager"], e["operation"]) for e in patched["metadata"]["managedFields"]] == [
        ("editor", "Update")
    ]
    assert managers(patched)[("editor", "Update")] == {"f:data": {"f:k": {}}}
    # Without fieldManager, the manager is the User-Agent's product name.
    code, again = api(
        "PATCH", f"{CM}/t", {"data": {"k": "8"}}, MERGE, **{"User-Agent": "Spark/4.3 (x)"}
    )
    assert ("Spark", "Update") in managers(again)


def test_service_ports_merge_by_port_and_protocol_and_the_selector_is_atomic(api: Server) -> None:
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

    path = f"{SVC}/drv-svc?fieldManager=fabric8&force=true"
    code, created = api("PATCH", path, service(7078, 7079), APPLY)
    assert code == 201, created
    item: dict[str, Any] = {".": {}, "f:name": {}, "f:port": {}, "f:targetPort": {}}
    assert managers(created)[("fabric8", "Apply")] == {
        "f:spec": {
            "f:clusterIP": {},
            "f:ports": {
                'k:{"port":7078,"protocol":"TCP"}': item,
                'k:{"port":7079,"protocol":"TCP"}': item,
            },
            "f:selector": {},
        }
    }
    ui_port = {**service(4040), "spec": {"ports": service(4040)["spec"]["ports"]}}
    assert api("PATCH", f"{SVC}/drv-svc?fieldManager=ui", ui_port, APPLY)[0] == 200
    code, after = api("PATCH", path, service(7078), APPLY)
    assert code == 200, after
    assert sorted(p["port"] for p in after["spec"]["ports"]) == [4040, 7078]


def test_sparks_network_policy_is_applied(api: Server) -> None:
    policy: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "app-policy", "labels": {"spark-app-selector": "spark-1"}},
        "spec": {
            "podSelector": {
                "matchLabels": {"spark-role": "executor", "spark-app-selector": "spark-1"}
            },
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"spark-app-selector": "spark-1"}}}]}
            ],
        },
    }
    code, created = api("PATCH", f"{NP}/app-policy?fieldManager=fabric8&force=true", policy, APPLY)
    assert code == 201, created
    assert created["spec"]["podSelector"] == policy["spec"]["podSelector"]


def test_an_apply_that_creates_needs_create_as_well_as_patch(api: Server) -> None:
    """RBAC: Spark's submitter needs create and patch on what it applies (its Role in
    deploy/overlays/cluster-mode/submitter-rbac.yaml): a patch-only account is refused with
    the create verb named; an apply of an existing object needs patch alone."""
    api("PATCH", f"{CM}/existing?fieldManager=admin", configmap("existing", {"k": "1"}), APPLY)
    patch_only = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}]
    with api.as_account("applier", patch_only) as account:
        code, status = account(
            "PATCH", f"{CM}/fresh?fieldManager=fabric8&force=true", configmap("fresh", {}), APPLY
        )
        assert code == 403, status
        assert status["message"] == (
            'configmaps "fresh" is forbidden: User "system:serviceaccount:ssa:applier" cannot '
            'create resource "configmaps" in API group "" in the namespace "ssa"'
        )
        code, _ = account(
            "PATCH",
            f"{CM}/existing?fieldManager=fabric8&force=true",
            configmap("existing", {"k": "2"}),
            APPLY,
        )
        assert code == 200


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
            "f:selector": {},
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
