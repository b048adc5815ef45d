"""The faults issue 11's fault suite drives: periodic watch drops, a storm of 410s, 429 for a
period, a restart with the state kept, a share of pods failing as they start. Each through the
typed API and the control endpoint, against the official client, on the virtual clock."""

from __future__ import annotations

import http.client
import time
from typing import Any

import orjson
import pytest
import urllib3
from execpods.kubesim import ClusterConfig, KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, core_for, open_watch, pod_body, read_events
from tests.kubesim.support import eventually, raw, status_of


def _ctl(sim: KubeSim, route: str, body: dict[str, Any] | None = None) -> Any:
    code, data = raw(sim, "POST", "/_kubesim/" + route, body or {})
    assert code == 200, data
    return data


def test_watches_are_cut_every_period_until_stopped(sim: KubeSim, core: CoreApi) -> None:
    _ctl(sim, "faults/drop-watches-every", {"seconds": 5})
    for _ in range(2):
        resp = open_watch(core, timeout=30, resource_version=sim.resource_version)
        assert sim.wait_for_watchers(1, timeout=10)
        sim.advance(4.9)
        assert sim.watch_count() == 1
        sim.advance(0.1)
        assert sim.watch_count() == 0
        with pytest.raises(urllib3.exceptions.ProtocolError):
            read_events(resp)  # cut mid-stream, not ended cleanly
    sim.drop_watches_every(0)
    resp = open_watch(core, timeout=1, resource_version=sim.resource_version)
    assert sim.wait_for_watchers(1, timeout=10)
    sim.advance(60)
    assert sim.watch_count() == 1
    assert read_events(resp) == []  # ended by its own timeout
    sim.drop_watches_every(1)
    sim.clear_faults()  # clearing the faults stops the drops too
    assert sim.clock.pending() == 0


def test_a_storm_of_410s_for_a_period(sim: KubeSim, core: CoreApi) -> None:
    rv = sim.resource_version
    _ctl(sim, "faults/expire-next", {"seconds": 30})
    for _ in range(3):
        with pytest.raises(ApiException) as exc:
            core.list_namespaced_pod(NS)
        assert (exc.value.status, status_of(exc.value)["reason"]) == (410, "Expired")
        events = read_events(open_watch(core, timeout=1, resource_version=rv))
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    core.create_namespaced_pod(NS, pod_body("writes-still-work"))
    sim.advance(30)
    assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == ["writes-still-work"]


def _answer(sim: KubeSim, method: str, body: Any = None) -> tuple[int, str | None]:
    """Status and Retry-After of one request. Not through the official client: urllib3 under it
    retries a GET answered 429 with Retry-After itself, sleeping that long in real time."""
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    try:
        data = None if body is None else orjson.dumps(body)
        conn.request(method, f"/api/v1/namespaces/{NS}/pods", body=data)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Retry-After")
    finally:
        conn.close()


def test_429_with_retry_after_for_a_period(sim: KubeSim) -> None:
    _ctl(sim, "faults/throttle", {"seconds": 30, "retryAfter": 5})
    assert _answer(sim, "GET") == (429, "5")
    assert _answer(sim, "POST", pod_body("p")) == (429, "5")
    sim.advance(29.9)
    assert _answer(sim, "GET") == (429, "5")
    sim.advance(0.1)
    assert _answer(sim, "GET") == (200, None)
    assert [r.status for r in sim.requests()] == [429, 429, 429, 200]


def test_a_restart_keeps_the_state_and_cuts_the_watches(sim: KubeSim, core: CoreApi) -> None:
    for i in range(3):
        core.create_namespaced_pod(NS, pod_body(f"p{i}"))
    sim.run_until_idle()
    before = core.list_namespaced_pod(NS)
    resp = open_watch(core, timeout=30, resource_version=before.metadata.resource_version)
    core.patch_namespaced_pod("p0", NS, {"metadata": {"labels": {"seen": "before-restart"}}})
    assert sim.wait_for_watchers(1, timeout=10)
    port = sim.port
    sim.restart()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        read_events(resp)
    assert sim.port == port
    after = core.list_namespaced_pod(NS)  # the same client, the same URL
    assert [p.metadata.uid for p in after.items] == [p.metadata.uid for p in before.items]
    assert after.items[0].metadata.labels == {"seen": "before-restart"}
    assert [p.status.phase for p in after.items] == ["Running"] * 3
    assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
    # A restarted server's cache starts from a fresh list: resuming an older watch is a 410.
    core.create_namespaced_pod(NS, pod_body("new"))
    events = read_events(
        open_watch(core, timeout=1, resource_version=before.metadata.resource_version)
    )
    assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    # A watch from the fresh list works.
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    resp = open_watch(core, timeout=2, resource_version=rv)
    core.delete_namespaced_pod("new", NS)  # unscheduled: marked (grace 0), then removed
    assert [e["type"] for e in read_events(resp, limit=2)] == ["MODIFIED", "DELETED"]
    assert sim.state()["restarts"] == 1


def test_a_restart_can_keep_the_event_window_and_be_down_for_a_while(
    sim: KubeSim, core: CoreApi
) -> None:
    rv = sim.resource_version
    core.create_namespaced_pod(NS, pod_body("p"))
    started = time.monotonic()
    sim.restart(down_seconds=0.2, forget_events=False)
    assert time.monotonic() - started >= 0.2
    events = read_events(open_watch(core, timeout=1, resource_version=rv))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "p")]


def test_the_control_endpoint_restarts_the_server(sim: KubeSim, core: CoreApi) -> None:
    core.create_namespaced_pod(NS, pod_body("p"))
    assert _ctl(sim, "restart", {"downSeconds": 0})["restarts"] == 0
    assert eventually(lambda: sim.restarts == 1)
    code, state = raw(sim, "GET", "/_kubesim/state")
    assert (code, state["restarts"], state["pods"]) == (200, 1, 1)


def test_a_share_of_pods_fails_as_they_start() -> None:
    cfg = ClusterConfig(nodes=2, pods_per_node=100, start_latency=1.0, start_jitter=0.0, seed=9)
    with KubeSim(cluster=cfg, deterministic=True) as sim, core_for(sim) as core:
        _ctl(sim, "config/failures", {"rate": 0.2, "after": 0})
        for i in range(100):
            core.create_namespaced_pod(NS, pod_body(f"p{i}"))
        sim.advance(1.0)  # every pod has started, or failed as it started
        phases = [p.status.phase for p in core.list_namespaced_pod(NS).items]
        failed = phases.count("Failed")
        assert 10 <= failed <= 30
        assert phases.count("Running") == 100 - failed
        sim.set_failures(0.0)
        core.create_namespaced_pod(NS, pod_body("healthy"))
        sim.run_until_idle()
        assert core.read_namespaced_pod("healthy", NS).status.phase == "Running"
        assert sim.state()["failures"] == {"rate": 0.0, "after": 10.0}
        code, err = raw(sim, "POST", "/_kubesim/config/failures", {"rate": 2})
        assert code == 400
        assert "failure_rate" in err["message"]


def test_losing_a_node_fails_half_the_pods_of_a_two_node_cluster() -> None:
    cfg = ClusterConfig(nodes=2, pods_per_node=50, seed=4)
    with KubeSim(cluster=cfg, deterministic=True) as sim, core_for(sim) as core:
        for i in range(10):
            core.create_namespaced_pod(NS, pod_body(f"p{i}"))
        sim.run_until_idle()
        node = sim.nodes()[0].name
        failed = _ctl(sim, f"nodes/{node}/lose")["failed"]
        assert len(failed) == 5
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items}
        assert sorted(n for n, p in pods.items() if p.status.reason == "NodeLost") == sorted(failed)
