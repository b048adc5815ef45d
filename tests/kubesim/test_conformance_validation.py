"""Conformance: what a cluster refuses or holds back, kubesim refuses or holds back too.

Through the pinned official client over HTTP: namespace and object names, containers' resource
names and quantities, and the kubelet's wait for a missing Secret or ConfigMap volume (the pod
stays Pending with its containers in ContainerCreating and a FailedMount event, then runs once
the object exists). Users' tests that pass here would fail against a cluster otherwise.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from execpods.kubesim import KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, pod_body
from tests.kubesim.support import status_of


def _refused(call: Any, *args: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as caught:
        call(*args)
    return caught.value.status, status_of(caught.value)


@pytest.mark.parametrize("namespace", ["Bad_NS", "a.b", "-lead", "x" * 64])
def test_a_namespace_name_that_is_no_dns_label_does_not_exist(
    core: CoreApi, namespace: str
) -> None:
    code, body = _refused(core.create_namespaced_pod, namespace, pod_body("p"))
    assert code == 404
    assert body["reason"] == "NotFound"
    assert body["details"]["kind"] == "namespaces"
    assert f'namespaces "{namespace}" not found' in body["message"]
    code, _ = _refused(core.create_namespaced_config_map, namespace, {"metadata": {"name": "c"}})
    assert code == 404
    code, _ = _refused(core.read_namespace, namespace)
    assert code == 404
    assert core.list_namespaced_pod(namespace).items == []  # a list of nothing, as a cluster


def test_a_namespace_exists_once_created_and_not_before(core: CoreApi) -> None:
    """As kube-apiserver: a valid name is no namespace until created; a create inside a missing
    namespace gets the NamespaceLifecycle admission plugin's 404 (for pods and other kinds)."""
    for call, body in (
        (core.create_namespaced_pod, pod_body("p")),
        (core.create_namespaced_config_map, {"metadata": {"name": "c"}}),
    ):
        code, status = _refused(call, "team-a1", body)
        assert (code, status["reason"], status["message"]) == (
            404,
            "NotFound",
            'namespaces "team-a1" not found',
        )
        assert status["details"] == {"name": "team-a1", "kind": "namespaces"}
    assert _refused(core.read_namespace, "team-a1")[0] == 404
    assert core.list_namespaced_pod("team-a1").items == []  # a list of nothing, as a cluster
    core.create_namespace({"metadata": {"name": "team-a1"}})
    core.create_namespaced_pod("team-a1", pod_body("p"))
    assert core.read_namespace("team-a1").status.phase == "Active"


@pytest.mark.parametrize(
    ("create", "name"),
    [
        ("create_namespaced_pod", "Upper"),
        ("create_namespaced_config_map", "under_score"),
        ("create_namespaced_secret", "x" * 254),
        ("create_namespaced_service", "dotted.name"),  # an RFC 1123 label, no dots
        ("create_namespaced_service", "ends-with-dash-"),
    ],
)
def test_object_names_follow_their_kinds_rules(core: CoreApi, create: str, name: str) -> None:
    body: dict[str, Any] = {"metadata": {"name": name}}
    if create == "create_namespaced_pod":
        body = pod_body(name)
    if create == "create_namespaced_service":
        body["spec"] = {"ports": [{"port": 80}]}
    code, status = _refused(getattr(core, create), NS, body)
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.name"


def _with_resources(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    body = pod_body(name)
    body["spec"]["containers"][0]["resources"] = resources
    return body


def test_resource_names_must_be_standard_or_fully_qualified(core: CoreApi) -> None:
    code, status = _refused(
        core.create_namespaced_pod, NS, _with_resources("p", {"limits": {"bad key!": "1"}})
    )
    assert code == 422
    cause = status["details"]["causes"][0]
    assert cause["field"] == "spec.containers[0].resources.limits[bad key!]"
    assert "name part must consist of alphanumeric characters" in cause["message"]
    code, status = _refused(
        core.create_namespaced_pod, NS, _with_resources("p", {"limits": {"gpu": "1"}})
    )
    assert code == 422
    cause = status["details"]["causes"][0]
    assert cause["field"] == "spec.containers[0].resources.limits[gpu]"
    assert "must be a standard resource type or fully qualified" in cause["message"]
    service = {"metadata": {"name": "1starts-with-digit"}, "spec": {"ports": [{"port": 80}]}}
    core.create_namespaced_service(NS, service)  # allowed since Kubernetes 1.34
    accepted = {"limits": {"cpu": "1", "memory": "1Gi", "example.com/gpu": "1"}}
    core.create_namespaced_pod(NS, _with_resources("ok", accepted))


@pytest.mark.parametrize(
    ("quantity", "error"),
    [
        ("lots", "quantities must match the regular expression"),
        ("1.2.3Gi", "quantities must match the regular expression"),
        ("5XB", "quantities must match the regular expression"),
        ("1e", "unable to parse quantity's suffix"),  # scanned whole, an unknown suffix
        ("--1", "unable to parse quantity's suffix"),
    ],
)
def test_a_quantity_that_does_not_parse_is_a_bad_request(
    core: CoreApi, quantity: str, error: str
) -> None:
    code, status = _refused(
        core.create_namespaced_pod, NS, _with_resources("p", {"requests": {"memory": quantity}})
    )
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert error in status["message"]


def test_negative_quantities_and_requests_over_limits_are_invalid(core: CoreApi) -> None:
    code, status = _refused(
        core.create_namespaced_pod, NS, _with_resources("p", {"requests": {"cpu": "-1"}})
    )
    assert code == 422
    assert "greater than or equal to 0" in status["message"]
    over = {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}
    code, status = _refused(core.create_namespaced_pod, NS, _with_resources("q", over))
    assert code == 422
    assert "must be less than or equal to cpu limit" in status["message"]


def test_a_quantity_beyond_int64_is_clamped_as_the_api_server_does(core: CoreApi) -> None:
    huge = {"limits": {"memory": "5072854620270126720Mi"}, "requests": {"memory": "1Mi"}}
    created = core.create_namespaced_pod(NS, _with_resources("huge", huge))
    assert created.spec.containers[0].resources.limits["memory"] == str(2**63 - 1)


def _with_volumes(name: str, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    body = pod_body(name)
    body["spec"]["volumes"] = volumes
    body["spec"]["containers"][0]["volumeMounts"] = [
        {"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes
    ]
    return body


def _failed_mounts(core: CoreApi, pod: str) -> list[Any]:
    events = core.list_namespaced_event(NS).items
    return [e for e in events if e.involved_object.name == pod and e.reason == "FailedMount"]


@pytest.mark.parametrize(
    ("volume", "kind", "create"),
    [
        ({"secret": {"secretName": "creds"}}, "secret", "create_namespaced_secret"),
        ({"configMap": {"name": "creds"}}, "configmap", "create_namespaced_config_map"),
        (
            {"projected": {"sources": [{"secret": {"name": "creds"}}]}},
            "secret",
            "create_namespaced_secret",
        ),
    ],
)
def test_a_pod_waits_in_container_creating_for_a_missing_volume_object(
    sim: KubeSim, core: CoreApi, volume: dict[str, Any], kind: str, create: str
) -> None:
    core.create_namespaced_pod(NS, _with_volumes("needs", [{"name": "v", **volume}]))
    sim.advance(60)
    pod = core.read_namespaced_pod("needs", NS)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    events = _failed_mounts(core, "needs")
    assert len(events) == 1, "one event, counted up on each retry"
    assert events[0].type == "Warning"
    expected = f'MountVolume.SetUp failed for volume "v" : {kind} "creds" not found'
    assert events[0].message == expected
    assert events[0].count > 1
    assert events[0].source.component == "kubelet"
    getattr(core, create)(NS, {"metadata": {"name": "creds"}})
    sim.advance(130)  # past the kubelet's longest wait between retries
    assert core.read_namespaced_pod("needs", NS).status.phase == "Running"


def test_an_optional_missing_volume_object_does_not_hold_the_pod(
    sim: KubeSim, core: CoreApi
) -> None:
    volumes = [{"name": "v", "secret": {"secretName": "absent", "optional": True}}]
    core.create_namespaced_pod(NS, _with_volumes("free", volumes))
    sim.run_until_idle()
    assert core.read_namespaced_pod("free", NS).status.phase == "Running"
    assert _failed_mounts(core, "free") == []


def test_kubectl_describe_shows_the_failed_mount(sim: KubeSim, core: CoreApi) -> None:
    """`kubectl describe pod` selects the pod's events by `involvedObject.*` fields."""
    from tests.kubesim.test_kubectl import kubectl_path

    volumes = [{"name": "v", "secret": {"secretName": "absent"}}]
    core.create_namespaced_pod(NS, _with_volumes("waits", volumes))
    sim.advance(5)
    described = subprocess.run(
        [kubectl_path(), "--kubeconfig", str(sim.kubeconfig_path), "describe", "pod", "waits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert described.returncode == 0, described.stderr
    assert "ContainerCreating" in described.stdout
    assert "FailedMount" in described.stdout
    assert 'secret "absent" not found' in described.stdout


def test_kubectl_get_ns_and_a_namespace_named_against_the_rules(
    sim: KubeSim, tmp_path: Any
) -> None:
    """`kubectl get ns` lists namespaces; applying one whose name is no DNS-1123 label is 422."""
    from tests.kubesim.test_kubectl import kubectl_path

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        command = [kubectl_path(), "--kubeconfig", str(sim.kubeconfig_path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-b\n")
    bad.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: Bad_NS\n")
    assert kubectl("apply", "-f", str(good)).returncode == 0
    refused = kubectl("apply", "-f", str(bad))
    assert refused.returncode != 0
    assert 'The Namespace "Bad_NS" is invalid: metadata.name' in refused.stderr
    listed = kubectl("get", "ns")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert {"default", "team-b"} <= set(names)
    assert "Bad_NS" not in names
    missing = kubectl("get", "ns", "Bad_NS")
    assert missing.returncode != 0
    assert 'namespaces "Bad_NS" not found' in missing.stderr


def test_a_privileged_container_that_may_not_escalate_is_invalid(core: CoreApi) -> None:
    """Found on the real API server: the pair is a contradiction, refused before admission."""
    body = pod_body("both")
    body["spec"]["containers"][0]["securityContext"] = {
        "privileged": True,
        "allowPrivilegeEscalation": False,
    }
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, body)
    assert exc.value.status == 422
    causes = status_of(exc.value)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.containers[0].securityContext"]
    assert (
        "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
        in (causes[0]["message"])
    )
