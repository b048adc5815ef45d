"""Conformance, part 1: create, get, list, selectors, patches, put and status.

The pinned official ``kubernetes`` client, over HTTP, against the simulator. Every behaviour the
simulator promises (see docs/kubesim.md) has a test in these modules. The simulator runs in
deterministic mode, so no test sleeps to wait for the kubelet: tests move the virtual clock.
"""

import pytest
from execpods.kubesim import KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import (
    NS,
    CoreApi,
    pod_body,
)
from tests.kubesim.support import made, names, raw, running_pod, status_of

# -- create / get / list / errors ----------------------------------------------------------------


def test_create_with_generate_name_get_and_list(core: CoreApi) -> None:
    created = core.create_namespaced_pod(NS, pod_body(generate_name="exec-"))
    name = created.metadata.name
    assert name.startswith("exec-")
    assert len(name) == len("exec-") + 5
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending"
    got = core.read_namespaced_pod(name, NS)
    assert got.metadata.uid == created.metadata.uid
    listed = core.list_namespaced_pod(NS)
    assert names(listed) == [name]
    assert listed.metadata.resource_version not in ("", "0", None)
    assert names(core.list_pod_for_all_namespaces()) == [name]
    assert core.list_namespaced_pod("other").items == []


def test_duplicate_create_is_409_and_missing_pod_is_404(core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_pod(NS, pod_body("p1"))
    assert dup.value.status == 409
    assert status_of(dup.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", NS)
    body = status_of(missing.value)
    assert missing.value.status == 404
    assert body["kind"] == "Status"
    assert body["reason"] == "NotFound"
    assert body["code"] == 404
    assert body["details"]["name"] == "nope"
    assert "nope" in body["message"]


def test_invalid_pod_is_422_with_causes(core: CoreApi) -> None:
    bad = pod_body("Bad_Name")
    bad["spec"]["containers"] = []
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, bad)
    body = status_of(exc.value)
    assert exc.value.status == 422
    assert body["reason"] == "Invalid"
    fields = {c["field"] for c in body["details"]["causes"]}
    assert fields == {"metadata.name", "spec.containers"}
    assert core.list_namespaced_pod(NS).items == []


def test_resource_versions_are_opaque_increasing_and_never_zero(core: CoreApi) -> None:
    rvs = [
        core.create_namespaced_pod(NS, pod_body(f"p{i}")).metadata.resource_version
        for i in range(3)
    ]
    assert "0" not in rvs
    assert len(set(rvs)) == 3
    fresh = core.list_namespaced_pod(
        NS, resource_version=rvs[-1], resource_version_match="NotOlderThan"
    )
    assert names(fresh) == ["p0", "p1", "p2"]
    assert fresh.metadata.resource_version not in (None, "", "0")
    # "0" asks for any version: kube-apiserver answers from its watch cache, which may not have
    # seen the last create yet (the flake this test once had on the real server); never newer.
    cached = core.list_namespaced_pod(NS, resource_version="0")
    assert set(names(cached)) <= {"p0", "p1", "p2"}
    assert cached.metadata.resource_version not in (None, "", "0")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", ["a1", "a2"]),
        ("app==a", ["a1", "a2"]),
        ("app!=a", ["b1", "none"]),
        ("app in (a, b)", ["a1", "a2", "b1"]),
        ("app notin (a)", ["b1", "none"]),
        ("app", ["a1", "a2", "b1"]),
        ("!app", ["none"]),
        ("app=a,tier=x", ["a1"]),
    ],
)
def test_label_selectors(core: CoreApi, selector: str, expected: list[str]) -> None:
    core.create_namespaced_pod(NS, pod_body("a1", labels={"app": "a", "tier": "x"}))
    core.create_namespaced_pod(NS, pod_body("a2", labels={"app": "a"}))
    core.create_namespaced_pod(NS, pod_body("b1", labels={"app": "b"}))
    core.create_namespaced_pod(NS, pod_body("none"))
    assert names(core.list_namespaced_pod(NS, label_selector=selector)) == expected


def test_field_selectors(sim: KubeSim, core: CoreApi) -> None:
    for i in range(2):
        core.create_namespaced_pod(NS, pod_body(f"p{i}"))
    sim.run_until_idle()
    core.create_namespaced_pod(NS, pod_body("late"))
    made(core, "other")
    core.create_namespaced_pod("other", pod_body("elsewhere"))
    assert names(core.list_namespaced_pod(NS, field_selector="metadata.name=p1")) == ["p1"]
    assert names(core.list_namespaced_pod(NS, field_selector="status.phase=Pending")) == ["late"]
    assert names(core.list_namespaced_pod(NS, field_selector="status.phase!=Pending")) == [
        "p0",
        "p1",
    ]
    node = core.read_namespaced_pod("p0", NS).spec.node_name
    on_node = core.list_namespaced_pod(NS, field_selector=f"spec.nodeName={node}")
    assert "p0" in names(on_node)
    assert "late" not in names(on_node)
    everywhere = core.list_pod_for_all_namespaces(field_selector="metadata.namespace=other")
    assert names(everywhere) == ["elsewhere"]


@pytest.mark.parametrize(
    ("kind", "selector"),
    [("label", "app in (a"), ("label", "app=a,,b"), ("field", "spec.image=x"), ("field", "bogus")],
)
def test_bad_selectors_are_400(core: CoreApi, kind: str, selector: str) -> None:
    kwargs = {"label_selector": selector} if kind == "label" else {"field_selector": selector}
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS, **kwargs)
    assert exc.value.status == 400
    assert status_of(exc.value)["reason"] == "BadRequest"


def test_list_pagination_with_limit_and_continue(core: CoreApi) -> None:
    for i in range(5):
        core.create_namespaced_pod(NS, pod_body(f"p{i}"))
    first = core.list_namespaced_pod(NS, limit=2)
    assert names(first) == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    core.create_namespaced_pod(NS, pod_body("p9"))  # not in the consistent snapshot
    second = core.list_namespaced_pod(NS, limit=10, _continue=first.metadata._continue)
    assert names(second) == ["p2", "p3", "p4"]
    assert second.metadata.resource_version == first.metadata.resource_version


# -- patch / put / status --------------------------------------------------------------------------


def test_strategic_merge_on_status_merges_conditions_and_replaces_container_statuses(
    sim: KubeSim, core: CoreApi
) -> None:
    body = pod_body("p")
    body["spec"]["containers"].append({"name": "side", "image": "busybox"})
    core.create_namespaced_pod(NS, body)
    sim.run_until_idle()
    before = core.read_namespaced_pod("p", NS)
    assert len(before.status.container_statuses) == 2
    patch = {
        "status": {
            "containerStatuses": [{"name": "side", "ready": False}],
            "conditions": [{"type": "Ready", "status": "False", "reason": "Manual"}],
        }
    }
    after = core.patch_namespaced_pod_status("p", NS, patch)
    # containerStatuses is an atomic list: the patch's list replaces it whole.
    assert [(c.name, c.ready) for c in after.status.container_statuses] == [("side", False)]
    conds = {c.type: c for c in after.status.conditions}
    assert conds["Ready"].status == "False"
    assert conds["Ready"].reason == "Manual"
    assert conds["PodScheduled"].status == "True"


def test_merge_patch_replaces_lists(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    patch = {"status": {"conditions": [{"type": "Custom", "status": "True"}]}}
    after = core.patch_namespaced_pod_status(
        "p", NS, patch, _content_type="application/merge-patch+json"
    )
    assert [c.type for c in after.status.conditions] == ["Custom"]


def test_json_patch_and_failed_test_op(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    ops = [{"op": "add", "path": "/metadata/labels/extra", "value": "yes"}]
    after = core.patch_namespaced_pod("p", NS, ops)
    assert after.metadata.labels == {"app": "a", "extra": "yes"}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, [{"op": "test", "path": "/metadata/name", "value": "x"}])
    assert exc.value.status == 422


def test_unsupported_patch_type_is_415(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    code, body = raw(
        sim,
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/p",
        {"metadata": {}},
        **{"Content-Type": "application/xml"},
    )
    assert code == 415
    assert body["reason"] == "UnsupportedMediaType"


def test_main_resource_writes_cannot_change_status_and_status_writes_keep_the_spec(
    sim: KubeSim, core: CoreApi
) -> None:
    running_pod(sim, core)
    after = core.patch_namespaced_pod(
        "p", NS, {"metadata": {"labels": {"x": "1"}}, "status": {"phase": "Failed"}}
    )
    assert after.metadata.labels["x"] == "1"
    assert after.status.phase == "Running"
    after = core.patch_namespaced_pod_status(
        "p", NS, {"metadata": {"labels": {"y": "2"}}, "status": {"phase": "Succeeded"}}
    )
    assert after.metadata.labels["y"] == "2"  # the status strategy resets the spec only
    assert after.status.phase == "Succeeded"


def test_noop_write_does_not_bump_resource_version(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    rv = core.read_namespaced_pod("p", NS).metadata.resource_version
    again = core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "a"}}})
    assert again.metadata.resource_version == rv
    assert sim.resource_version == rv


def test_put_replaces_and_checks_resource_version(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    pod = core.read_namespaced_pod("p", NS)
    pod.metadata.labels = {"app": "b"}
    pod.status.phase = "Failed"
    replaced = core.replace_namespaced_pod("p", NS, pod)
    assert replaced.metadata.labels == {"app": "b"}
    assert replaced.status.phase == "Running"
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_pod("p", NS, pod)  # pod still carries the old resourceVersion
    assert stale.value.status == 409
    assert status_of(stale.value)["reason"] == "Conflict"
    fresh = core.read_namespaced_pod_status("p", NS)
    fresh.status.phase = "Succeeded"
    assert core.replace_namespaced_pod_status("p", NS, fresh).status.phase == "Succeeded"


def test_pod_spec_is_immutable_except_image(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, {"spec": {"restartPolicy": "Always"}})
    assert exc.value.status == 422
    patch = {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    assert core.patch_namespaced_pod("p", NS, patch).spec.containers[0].image == "busybox:2"


@pytest.mark.parametrize("content_type", [None, "application/merge-patch+json"])
def test_a_patch_cannot_unbind_a_pod(sim: KubeSim, core: CoreApi, content_type: str | None) -> None:
    """Deleting nodeName is a spec change: 422, and the binding stays."""
    running_pod(sim, core)
    node = core.read_namespaced_pod("p", NS).spec.node_name
    kwargs = {"_content_type": content_type} if content_type else {}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, {"spec": {"nodeName": None}}, **kwargs)
    assert exc.value.status == 422
    assert "pod updates may not change fields" in status_of(exc.value)["message"]
    stored = sim.pod("p")
    assert stored is not None
    assert stored["spec"]["nodeName"] == node
