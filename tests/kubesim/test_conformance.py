"""Conformance: the pinned official ``kubernetes`` client, over HTTP, against the simulator.

Every behaviour the simulator promises (see docs/kubesim.md) has a test here. The simulator runs
in deterministic mode, so no test sleeps to wait for the kubelet: tests move the virtual clock.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import urllib3
from execpods.kubesim import KubeSim
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import (
    NS,
    ClientApi,
    CoreApi,
    core_api,
    new_client,
    new_watch,
    open_watch,
    pod_body,
    read_events,
)


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(exc.body or "{}")
    return body


def once_watching(sim: KubeSim, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` in a helper thread as soon as a watch is open; the test reads the watch."""

    def run() -> None:
        if sim.wait_for_watchers(1, timeout=10):
            action()

    t = threading.Thread(target=run)
    t.start()
    return t


def collect(stream: Any, into: list[str]) -> None:
    """Append each event's type to ``into`` until the stream ends or raises."""
    for event in stream:
        into.append(event["type"])


def names(pods: Any) -> list[str]:
    return sorted(p.metadata.name for p in pods.items)


def raw(sim: KubeSim, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    try:
        data = None if body is None else orjson.dumps(body)
        hdrs = {"Content-Type": "application/json", **headers}
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read()
        return resp.status, orjson.loads(text) if text else None
    finally:
        conn.close()


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
    listed = core.list_namespaced_pod(NS, resource_version="0")
    assert names(listed) == ["p0", "p1", "p2"]
    assert listed.metadata.resource_version == rvs[-1]


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


def _running_pod(sim: KubeSim, core: CoreApi, name: str = "p") -> None:
    core.create_namespaced_pod(NS, pod_body(name, labels={"app": "a"}))
    sim.run_until_idle()


def test_strategic_merge_on_status_merges_lists_by_key(sim: KubeSim, core: CoreApi) -> None:
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
    statuses = {c.name: c for c in after.status.container_statuses}
    assert set(statuses) == {"main", "side"}
    assert statuses["side"].ready is False
    assert statuses["main"].ready is True
    conds = {c.type: c for c in after.status.conditions}
    assert conds["Ready"].status == "False"
    assert conds["Ready"].reason == "Manual"
    assert conds["PodScheduled"].status == "True"


def test_merge_patch_replaces_lists(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
    patch = {"status": {"conditions": [{"type": "Custom", "status": "True"}]}}
    after = core.patch_namespaced_pod_status(
        "p", NS, patch, _content_type="application/merge-patch+json"
    )
    assert [c.type for c in after.status.conditions] == ["Custom"]


def test_json_patch_and_failed_test_op(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
    ops = [{"op": "add", "path": "/metadata/labels/extra", "value": "yes"}]
    after = core.patch_namespaced_pod("p", NS, ops)
    assert after.metadata.labels == {"app": "a", "extra": "yes"}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, [{"op": "test", "path": "/metadata/name", "value": "x"}])
    assert exc.value.status == 422


def test_unsupported_patch_type_is_415(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
    code, body = raw(
        sim,
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/p",
        {"metadata": {}},
        **{"Content-Type": "application/apply-patch+yaml"},
    )
    assert code == 415
    assert body["reason"] == "UnsupportedMediaType"


def test_main_resource_writes_cannot_change_status_and_status_writes_only_status(
    sim: KubeSim, core: CoreApi
) -> None:
    _running_pod(sim, core)
    after = core.patch_namespaced_pod(
        "p", NS, {"metadata": {"labels": {"x": "1"}}, "status": {"phase": "Failed"}}
    )
    assert after.metadata.labels["x"] == "1"
    assert after.status.phase == "Running"
    after = core.patch_namespaced_pod_status(
        "p", NS, {"metadata": {"labels": {"y": "2"}}, "status": {"phase": "Succeeded"}}
    )
    assert "y" not in after.metadata.labels
    assert after.status.phase == "Succeeded"


def test_noop_write_does_not_bump_resource_version(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
    rv = core.read_namespaced_pod("p", NS).metadata.resource_version
    again = core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "a"}}})
    assert again.metadata.resource_version == rv
    assert sim.resource_version == rv


def test_put_replaces_and_checks_resource_version(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
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
    _running_pod(sim, core)
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, {"spec": {"restartPolicy": "Always"}})
    assert exc.value.status == 422
    patch = {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    assert core.patch_namespaced_pod("p", NS, patch).spec.containers[0].image == "busybox:2"


# -- watch -----------------------------------------------------------------------------------------


def test_watch_without_rv_starts_with_synthetic_added(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("a", labels={"app": "a"}))
    core.create_namespaced_pod(NS, pod_body("b", labels={"app": "b"}))
    w = new_watch()
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(
            core.list_namespaced_pod,
            NS,
            label_selector="app=a",
            timeout_seconds=1,
            _request_timeout=(5, 11),
        )
    ]
    assert seen == [("ADDED", "a")]


def test_watch_from_rv_streams_strictly_later_events(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("old"))
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("new"))
    resp = open_watch(core, resource_version=rv)
    events = read_events(resp, limit=1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "new")]
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) > int(rv)


def test_watch_streams_live_events_in_order(sim: KubeSim, core: CoreApi) -> None:
    resp = open_watch(core, timeout=3, resource_version=sim.resource_version)
    core.create_namespaced_pod(NS, pod_body("p"))
    sim.run_until_idle()
    events = read_events(resp, limit=3)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED"]
    assert events[1]["object"]["spec"]["nodeName"]
    assert events[2]["object"]["status"]["phase"] == "Running"
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)


def test_label_change_moves_pod_out_of_and_into_selector(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p", labels={"app": "a"}))
    resp = open_watch(core, label_selector="app=a", resource_version=sim.resource_version)
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "b"}}})
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"tier": "1"}}})  # unseen
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "a"}}})
    events = read_events(resp, limit=2)
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    assert events[0]["object"]["metadata"]["labels"]["app"] == "b"
    assert events[1]["object"]["metadata"]["labels"] == {"app": "a", "tier": "1"}


def test_watch_from_compacted_rv_gets_410_error_event(sim: KubeSim, core: CoreApi) -> None:
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("p"))
    sim.compact()
    seen: list[str] = []
    stream = new_watch().stream(
        core.list_namespaced_pod,
        NS,
        resource_version=rv,
        timeout_seconds=2,
        _request_timeout=(5, 12),
    )
    with pytest.raises(ApiException) as exc:
        collect(stream, seen)
    assert seen == []
    assert exc.value.status == 410
    with pytest.raises(ApiException) as exact:
        core.list_namespaced_pod(NS, resource_version=rv, resource_version_match="Exact")
    assert exact.value.status == 410
    assert status_of(exact.value)["reason"] == "Expired"


def test_bounded_event_window_expires_old_versions() -> None:
    with KubeSim(deterministic=True, event_window=3) as small:
        c = new_client(small.url)
        try:
            core = core_api(c)
            rv = core.list_namespaced_pod(NS).metadata.resource_version
            for i in range(3):
                core.create_namespaced_pod(NS, pod_body(f"p{i}"))
            assert (
                names(
                    core.list_namespaced_pod(
                        NS, resource_version=rv, resource_version_match="Exact"
                    )
                )
                == []
            )
            core.create_namespaced_pod(NS, pod_body("p3"))
            events = read_events(open_watch(core, resource_version=rv), limit=1)
            assert events[0]["type"] == "ERROR"
            assert events[0]["object"]["code"] == 410
        finally:
            c.close()


def test_exact_list_returns_the_state_at_that_version(core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("a"))
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("b"))
    core.delete_namespaced_pod("a", NS)
    then = core.list_namespaced_pod(NS, resource_version=rv, resource_version_match="Exact")
    assert names(then) == ["a"]
    assert then.metadata.resource_version == rv
    assert names(core.list_namespaced_pod(NS)) == ["b"]


def test_410_mid_watch(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p"))

    t = once_watching(sim, sim.expire_watches)
    seen: list[str] = []
    stream = new_watch().stream(
        core.list_namespaced_pod, NS, timeout_seconds=5, _request_timeout=(5, 15)
    )
    with pytest.raises(ApiException) as exc:
        collect(stream, seen)
    t.join(10)
    assert seen == ["ADDED"]
    assert exc.value.status == 410


def test_injected_410_on_next_list_and_watch(sim: KubeSim, core: CoreApi) -> None:
    sim.expire_next(2)
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS)
    assert exc.value.status == 410
    events = read_events(open_watch(core), limit=5)
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410
    assert core.list_namespaced_pod(NS).items == []


def test_bookmarks_when_allowed(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p"))
    rv = sim.resource_version
    events = read_events(open_watch(core, timeout=1, allow_watch_bookmarks=True))
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[-1]["object"]["metadata"]["resourceVersion"] == rv
    plain = read_events(open_watch(core, timeout=1))
    assert [e["type"] for e in plain] == ["ADDED"]


def test_periodic_bookmarks_and_timeout_closes_stream() -> None:
    with KubeSim(deterministic=True, bookmark_interval=0.2) as s:
        c = new_client(s.url)
        try:
            core = core_api(c)
            started = time.monotonic()
            events = read_events(open_watch(core, timeout=1, allow_watch_bookmarks=True))
            elapsed = time.monotonic() - started
        finally:
            c.close()
    assert 0.9 <= elapsed < 5
    assert len(events) >= 3
    assert {e["type"] for e in events} == {"BOOKMARK"}


@pytest.mark.parametrize("value", ["true", "True", "1", "t"])
def test_query_booleans_parse_like_go(sim: KubeSim, value: str) -> None:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    try:
        conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch={value}&timeoutSeconds=0")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
        assert resp.getheader("Transfer-Encoding") == "chunked"
        conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=yes")
        bad = conn.getresponse()
        bad.read()
        assert bad.status == 400
    finally:
        conn.close()


def test_drop_watches_cuts_the_connection(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p"))

    t = once_watching(sim, sim.drop_watches)
    seen: list[str] = []
    stream = new_watch().stream(
        core.list_namespaced_pod, NS, timeout_seconds=5, _request_timeout=(5, 15)
    )
    with pytest.raises(urllib3.exceptions.ProtocolError):
        collect(stream, seen)
    t.join(10)
    assert seen == ["ADDED"]
    assert sim.watch_count() == 0


# -- deletion --------------------------------------------------------------------------------------


def test_graceful_delete_event_order(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
    resp = open_watch(core, timeout=3, resource_version=sim.resource_version)
    deleted = core.delete_namespaced_pod("p", NS, grace_period_seconds=10)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 10
    assert core.read_namespaced_pod("p", NS).metadata.deletion_timestamp is not None
    sim.run_until_idle()
    events = read_events(resp, limit=3)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionTimestamp"].endswith("Z")
    final = events[2]["object"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert final["exitCode"] == 143
    with pytest.raises(ApiException):
        core.read_namespaced_pod("p", NS)


def test_delete_is_immediate_for_unscheduled_and_terminated_pods(
    sim: KubeSim, core: CoreApi
) -> None:
    core.create_namespaced_pod(NS, pod_body("unscheduled"))
    core.create_namespaced_pod(
        NS, pod_body("done", annotations={"kubesim.execpods.io/exit-after": "1"})
    )
    resp = open_watch(core, timeout=2, resource_version=sim.resource_version)
    core.delete_namespaced_pod("unscheduled", NS)
    sim.run_until_idle()
    assert core.read_namespaced_pod("done", NS).status.phase == "Succeeded"
    core.delete_namespaced_pod("done", NS)
    assert core.list_namespaced_pod(NS).items == []
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in read_events(resp, limit=5)]
    assert ("DELETED", "unscheduled") in events
    assert events[-1] == ("DELETED", "done")
    assert ("MODIFIED", "unscheduled") not in events


def test_finalizers_hold_the_pod_until_removed(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p", finalizers=["example.com/keep"]))
    sim.run_until_idle()
    core.delete_namespaced_pod("p", NS, grace_period_seconds=5)
    sim.run_until_idle()
    held = core.read_namespaced_pod("p", NS)
    assert held.status.phase == "Failed"
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_pod("p", NS, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("p", NS)
    assert exc.value.status == 404


def test_redelete_only_shortens_grace_and_zero_is_immediate(sim: KubeSim, core: CoreApi) -> None:
    _running_pod(sim, core)
    sim.pause_kubelet()
    core.delete_namespaced_pod("p", NS, grace_period_seconds=20)
    longer = core.delete_namespaced_pod("p", NS, grace_period_seconds=60)
    assert longer.metadata.deletion_grace_period_seconds == 20
    shorter = core.delete_namespaced_pod("p", NS, grace_period_seconds=5)
    assert shorter.metadata.deletion_grace_period_seconds == 5
    core.delete_namespaced_pod("p", NS, grace_period_seconds=0)
    assert core.list_namespaced_pod(NS).items == []


def test_deletecollection_by_exec_id_and_phase(sim: KubeSim, core: CoreApi) -> None:
    # 2 nodes x 3 pods: the first 6 run, the rest stay Pending (Unschedulable).
    for i in range(8):
        core.create_namespaced_pod(NS, pod_body(f"exec-{i}", labels={"spark-exec-id": str(i)}))
    sim.run_until_idle()
    pending = names(core.list_namespaced_pod(NS, field_selector="status.phase=Pending"))
    assert pending == ["exec-6", "exec-7"]
    resp = core.delete_collection_namespaced_pod(
        NS,
        label_selector="spark-exec-id in (3,6,7)",
        field_selector="status.phase=Pending",
        _preload_content=False,
    )
    result = orjson.loads(resp.data)
    assert result["kind"] == "PodList"
    assert sorted(p["metadata"]["name"] for p in result["items"]) == ["exec-6", "exec-7"]
    remaining = names(core.list_namespaced_pod(NS))
    assert remaining == [f"exec-{i}" for i in range(6)]
    resp = core.delete_collection_namespaced_pod(
        NS, label_selector="spark-exec-id in (3,4)", _preload_content=False
    )
    marked = orjson.loads(resp.data)["items"]
    assert all(p["metadata"]["deletionTimestamp"] for p in marked)
    sim.run_until_idle()
    assert names(core.list_namespaced_pod(NS)) == ["exec-0", "exec-1", "exec-2", "exec-5"]


# -- faults, discovery, transport ------------------------------------------------------------------


def test_server_errors_for_a_period_of_virtual_time(sim: KubeSim, core: CoreApi) -> None:
    sim.fail_requests(503, seconds=5)
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS)
    assert exc.value.status == 503
    assert status_of(exc.value)["reason"] == "ServiceUnavailable"
    sim.advance(5)
    assert core.list_namespaced_pod(NS).items == []
    sim.fail_requests(500, count=1)
    with pytest.raises(ApiException) as once:
        core.list_namespaced_pod(NS)
    assert once.value.status == 500
    assert core.list_namespaced_pod(NS).items == []


def test_throttle_sends_429_with_retry_after(core: CoreApi, sim: KubeSim) -> None:
    sim.throttle(1, retry_after=7)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod_body("p"))
    assert exc.value.status == 429
    assert exc.value.headers is not None
    assert exc.value.headers["Retry-After"] == "7"
    assert core.create_namespaced_pod(NS, pod_body("p")).metadata.name == "p"


@pytest.mark.parametrize(("code", "reason"), [(403, "Forbidden"), (422, "Invalid")])
def test_admission_failures_on_create(core: CoreApi, sim: KubeSim, code: int, reason: str) -> None:
    sim.reject_creates(code, count=1, message="quota" if code == 422 else "")
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod_body("p"))
    assert exc.value.status == code
    assert status_of(exc.value)["reason"] == reason
    assert core.list_namespaced_pod(NS).items == []
    core.create_namespaced_pod(NS, pod_body("p"))


def test_added_latency_per_request(core: CoreApi, sim: KubeSim) -> None:
    core.list_namespaced_pod(NS)
    sim.set_latency(0.2)
    started = time.monotonic()
    core.list_namespaced_pod(NS)
    assert time.monotonic() - started >= 0.2
    sim.clear_faults()
    started = time.monotonic()
    core.list_namespaced_pod(NS)
    assert time.monotonic() - started < 0.2


def test_request_log_records_method_path_query_status(sim: KubeSim, core: CoreApi) -> None:
    sim.clear_requests()
    core.create_namespaced_pod(NS, pod_body("p"))
    core.list_namespaced_pod(NS, label_selector="app=a")
    with pytest.raises(ApiException):
        core.read_namespaced_pod("missing", NS)
    log = sim.requests()
    assert [(r.method, r.path, r.status) for r in log] == [
        ("POST", f"/api/v1/namespaces/{NS}/pods", 201),
        ("GET", f"/api/v1/namespaces/{NS}/pods", 200),
        ("GET", f"/api/v1/namespaces/{NS}/pods/missing", 404),
    ]
    assert log[1].query == {"labelSelector": "app=a"}
    assert sim.request_counts() == {"create": 1, "list": 1, "get": 1}


def test_discovery_and_version(api_client: ClientApi) -> None:
    version = client.VersionApi(api_client).get_code()
    assert version.major == "1"
    assert version.git_version.startswith("v1.")
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    resources = core_api(api_client).get_api_resources()
    pods = next(r for r in resources.resources if r.name == "pods")
    assert pods.namespaced
    assert "deletecollection" in pods.verbs


def test_keep_alive_and_no_nagle_delay(sim: KubeSim) -> None:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    try:
        conn.request("POST", f"/api/v1/namespaces/{NS}/pods", body=orjson.dumps(pod_body("p")))
        conn.getresponse().read()
        sock = conn.sock
        started = time.monotonic()
        for _ in range(100):
            conn.request("GET", f"/api/v1/namespaces/{NS}/pods/p")
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.getheader("Content-Length")
            resp.read()
        elapsed = time.monotonic() - started
        assert conn.sock is sock  # one connection served every request
    finally:
        conn.close()
    assert elapsed < 2.0  # with Nagle's delay 100 requests take about 4 s


def test_delete_reads_the_body_and_keeps_the_connection_usable(sim: KubeSim) -> None:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    try:
        for i in range(2):
            conn.request(
                "POST", f"/api/v1/namespaces/{NS}/pods", body=orjson.dumps(pod_body(f"p{i}"))
            )
            assert conn.getresponse().read()
        body = orjson.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        conn.request("DELETE", f"/api/v1/namespaces/{NS}/pods/p0", body=body)
        deleted = conn.getresponse()
        assert deleted.status == 200
        assert orjson.loads(deleted.read())["metadata"]["name"] == "p0"
        conn.request("GET", f"/api/v1/namespaces/{NS}/pods")
        resp = conn.getresponse()
        assert [p["metadata"]["name"] for p in orjson.loads(resp.read())["items"]] == ["p1"]
    finally:
        conn.close()


def test_malformed_requests_get_a_status_body(sim: KubeSim) -> None:
    with socket.create_connection((sim.host, sim.port), timeout=10) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        reply = sock.makefile("rb").read()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert orjson.loads(body)["kind"] == "Status"
    code, status = raw(sim, "OPTIONS", f"/api/v1/namespaces/{NS}/pods")
    assert code == 405
    assert status["reason"] == "MethodNotAllowed"
