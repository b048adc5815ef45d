"""Conformance, part 2: watch, resourceVersions, compaction, bookmarks.

The pinned official ``kubernetes`` client, over HTTP, against the simulator. Every behaviour the
simulator promises (see docs/kubesim.md) has a test in these modules. The simulator runs in
deterministic mode, so no test sleeps to wait for the kubelet: tests move the virtual clock.
"""

import time

import orjson
import pytest
import urllib3
from execpods.kubesim import KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import (
    NS,
    CoreApi,
    core_for,
    new_watch,
    open_watch,
    pod_body,
    read_events,
)
from tests.kubesim.support import collect, connection, names, once_watching, status_of

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


def test_watch_from_rv_zero_starts_from_the_current_state(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("a"))
    core.create_namespaced_pod(NS, pod_body("b"))
    core.delete_namespaced_pod("a", NS)  # unscheduled: gone at once
    events = read_events(open_watch(core, timeout=1, resource_version="0"))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]


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
    # Leaving the selection: the object as it last matched, at the event's version.
    assert events[0]["object"]["metadata"]["labels"]["app"] == "a"
    assert events[1]["object"]["metadata"]["labels"] == {"app": "a", "tier": "1"}


@pytest.mark.kubesim_only(
    reason=(
        "compact() empties kubesim's event window at once; kube-apiserver's watch cache "
        "serves old versions until its capacity is exceeded, so an etcd compaction alone does"
        " not 410 a watch"
    )
)
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


@pytest.mark.kubesim_only(
    reason="a window of 3 events is kubesim's setting; kube-apiserver sizes its watch cache "
    "itself (hundreds of events and more), so a handful of creates never expires a version"
)
@pytest.mark.usefixtures("server_kind")
def test_bounded_event_window_expires_old_versions() -> None:
    with KubeSim(deterministic=True, event_window=3) as small, core_for(small) as core:
        rv = core.list_namespaced_pod(NS).metadata.resource_version
        for i in range(3):
            core.create_namespaced_pod(NS, pod_body(f"p{i}"))
        exact = core.list_namespaced_pod(NS, resource_version=rv, resource_version_match="Exact")
        assert names(exact) == []
        core.create_namespaced_pod(NS, pod_body("p3"))
        events = read_events(open_watch(core, resource_version=rv), limit=1)
        assert events[0]["type"] == "ERROR"
        assert events[0]["object"]["code"] == 410


def test_exact_list_returns_the_state_at_that_version(core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("a"))
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("b"))
    core.delete_namespaced_pod("a", NS)
    then = core.list_namespaced_pod(NS, resource_version=rv, resource_version_match="Exact")
    assert names(then) == ["a"]
    assert then.metadata.resource_version == rv
    assert names(core.list_namespaced_pod(NS)) == ["b"]


@pytest.mark.kubesim_only(reason="fault injection (an ERROR 410 sent to open watches)")
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


@pytest.mark.kubesim_only(reason="fault injection (410 on the next list and watch)")
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


@pytest.mark.kubesim_only(
    reason="a bookmark every 0.2 s is kubesim's setting; kube-apiserver sends them about once a "
    "minute and before a watch's timeout, which no test of seconds can wait for"
)
@pytest.mark.usefixtures("server_kind")
def test_periodic_bookmarks_and_timeout_closes_stream() -> None:
    with KubeSim(deterministic=True, bookmark_interval=0.2) as s, core_for(s) as core:
        started = time.monotonic()
        events = read_events(open_watch(core, timeout=1, allow_watch_bookmarks=True))
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 5
    assert len(events) >= 3
    assert {e["type"] for e in events} == {"BOOKMARK"}


@pytest.mark.parametrize(
    ("value", "watch"),
    [("true", True), ("True", True), ("1", True), ("yes", True), ("0", False), ("FALSE", False)],
)
def test_query_booleans_convert_as_the_api_server_does(
    sim: KubeSim, value: str, watch: bool
) -> None:
    """apimachinery's conversion: only 0 and false (any case) are false; anything else true."""
    conn = connection(sim)
    try:
        conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch={value}&timeoutSeconds=1")
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200
        if watch:
            assert resp.getheader("Transfer-Encoding") == "chunked"
        else:
            assert orjson.loads(body)["kind"] == "PodList"
    finally:
        conn.close()


@pytest.mark.kubesim_only(reason="fault injection (cut watch connections)")
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
