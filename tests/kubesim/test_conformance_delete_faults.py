"""Conformance, part 3: deletion, faults, discovery and the transport.

The pinned official ``kubernetes`` client, over HTTP, against the simulator. Every behaviour the
simulator promises (see docs/kubesim.md) has a test in these modules. The simulator runs in
deterministic mode, so no test sleeps to wait for the kubelet: tests move the virtual clock.
"""

import socket
import time

import orjson
import pytest
from execpods.kubesim import ClusterConfig, KubeSim
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import (
    NS,
    ClientApi,
    CoreApi,
    client_of,
    cluster_on,
    core_api,
    open_watch,
    pod_body,
    read_events,
)
from tests.kubesim.support import connection, names, raw, running_pod, status_of

# -- deletion --------------------------------------------------------------------------------------


def test_graceful_delete_event_order(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    resp = open_watch(core, timeout=3, resource_version=sim.resource_version)
    deleted = core.delete_namespaced_pod("p", NS, grace_period_seconds=10)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 10
    assert core.read_namespaced_pod("p", NS).metadata.deletion_timestamp is not None
    sim.run_until_idle()
    events = read_events(resp, limit=4)
    # Marked; the kubelet's final status; its delete with grace 0 (the deletion shortened to
    # now), then gone: kube-apiserver's order.
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionTimestamp"].endswith("Z")
    assert events[2]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    final = events[3]["object"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert final["exitCode"] == 143
    with pytest.raises(ApiException):
        core.read_namespaced_pod("p", NS)


def test_a_container_that_outlives_its_grace_is_killed_with_137(
    server_kind: str, request: pytest.FixtureRequest
) -> None:
    """The kubelet sends SIGTERM, waits the grace period, then SIGKILL: a container slower to
    stop than its grace (``stop_latency`` 3 s, grace 1 s) ends with 137, not 143: an executor
    after `kubectl drain --grace-period=1`. On the real server the same node simulation writes
    the status through ``pods/status`` and deletes the pod as the kubelet does."""
    cfg = ClusterConfig(nodes=1, start_latency=0.1, start_jitter=0.0, stop_latency=3.0)
    with cluster_on(server_kind, request, cfg) as slow, client_of(slow) as api_client:
        api = core_api(api_client)
        api.create_namespaced_pod(NS, pod_body("p"))
        slow.advance(1.0)
        assert api.read_namespaced_pod("p", NS).status.phase == "Running"
        api.delete_namespaced_pod("p", NS, grace_period_seconds=1)
        slow.advance(0.5)
        assert api.read_namespaced_pod("p", NS).metadata.deletion_timestamp is not None
        resp = open_watch(api, timeout=3, resource_version=slow.resource_version)
        slow.advance(1.0)
        events = read_events(resp, limit=2)
    final = events[-1]["object"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert final["exitCode"] == 137


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
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in read_events(resp, limit=8)]
    # Each delete is at once: marked with grace 0 (MODIFIED) and removed (DELETED) in one call.
    gone = events.index(("DELETED", "unscheduled"))
    assert events[gone - 1] == ("MODIFIED", "unscheduled")
    assert events[-2:] == [("MODIFIED", "done"), ("DELETED", "done")]


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
    running_pod(sim, core)
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
    listed = orjson.loads(resp.data)["items"]
    assert sorted(p["metadata"]["name"] for p in listed) == ["exec-3", "exec-4"]
    assert not any(p["metadata"].get("deletionTimestamp") for p in listed)  # as listed
    for name in ("exec-3", "exec-4"):  # running: now terminating gracefully
        assert core.read_namespaced_pod(name, NS).metadata.deletion_timestamp is not None
    sim.run_until_idle()
    assert names(core.list_namespaced_pod(NS)) == ["exec-0", "exec-1", "exec-2", "exec-5"]


# -- faults, discovery, transport ------------------------------------------------------------------


@pytest.mark.kubesim_only(
    reason=(
        "fault injection (500/503 for a period of virtual time): a real server has no such switch"
    )
)
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


@pytest.mark.kubesim_only(
    reason="fault injection (503 in bursts of virtual time): a real server has no such switch"
)
def test_server_errors_in_bursts_recur_until_cleared(sim: KubeSim, core: CoreApi) -> None:
    sim.faults.fail_in_bursts(503, every=2.0, lasting=0.5)
    outcomes = []
    for _ in range(8):  # every 0.5 s of virtual time over two periods
        try:
            core.list_namespaced_pod(NS)
            outcomes.append(200)
        except ApiException as error:
            outcomes.append(error.status)
        sim.advance(0.5)
    assert outcomes == [503, 200, 200, 200, 503, 200, 200, 200]
    sim.clear_faults()
    assert core.list_namespaced_pod(NS).items == []
    with pytest.raises(ValueError, match="period"):
        sim.faults.fail_in_bursts(503, every=1.0, lasting=1.0)


@pytest.mark.kubesim_only(
    reason="fault injection (429 on demand): a real server answers 429 only under load (APF)"
)
def test_throttle_sends_429_with_retry_after(core: CoreApi, sim: KubeSim) -> None:
    sim.throttle(1, retry_after=7)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod_body("p"))
    assert exc.value.status == 429
    assert exc.value.headers is not None
    assert exc.value.headers["Retry-After"] == "7"
    assert core.create_namespaced_pod(NS, pod_body("p")).metadata.name == "p"


@pytest.mark.kubesim_only(
    reason=(
        "fault injection (refused creates); real refusals are proved by tests/realapi "
        "(PodSecurity, ResourceQuota)"
    )
)
@pytest.mark.parametrize(
    ("code", "reason", "text"),
    [(403, "Forbidden", "is forbidden"), (422, "Invalid", "exceeded quota")],
)
def test_admission_failures_on_create(
    core: CoreApi, sim: KubeSim, code: int, reason: str, text: str
) -> None:
    sim.reject_creates(code, count=1)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod_body("p"))
    assert exc.value.status == code
    status = status_of(exc.value)
    assert status["reason"] == reason
    assert text in status["message"]
    assert status["details"]["name"] == "p"
    assert core.list_namespaced_pod(NS).items == []
    core.create_namespaced_pod(NS, pod_body("p"))


@pytest.mark.kubesim_only(reason="fault injection (added latency)")
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


@pytest.mark.kubesim_only(reason="kubesim's request log, a test aid a real server does not keep")
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


@pytest.mark.kubesim_only(reason="kubesim's request log, a test aid a real server does not keep")
def test_request_log_keeps_who_asked_and_on_request_what_they_sent(
    sim: KubeSim, core: CoreApi
) -> None:
    """The User-Agent always; the body only once asked (`keep_request_bodies`): comparing two
    clients call by call needs what each wrote, a benchmark of thousands of pods does not."""
    sim.clear_requests()
    core.api_client.user_agent = "tests/kubesim"
    core.create_namespaced_pod(NS, pod_body("a"))
    sim.keep_request_bodies()
    core.create_namespaced_pod(NS, pod_body("b"))
    core.delete_namespaced_pod("b", NS, grace_period_seconds=7)
    first, second, deleted = sim.requests()
    assert first.user_agent == second.user_agent == "tests/kubesim"
    assert first.body is None
    assert second.body is not None
    assert orjson.loads(second.body)["metadata"]["name"] == "b"
    assert deleted.query == {"gracePeriodSeconds": "7"}  # this client sends it in the query


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
    conn = connection(sim)
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


@pytest.mark.kubesim_only(reason="reads kubesim's own server sockets")
def test_every_connection_has_tcp_nodelay(sim: KubeSim, core: CoreApi) -> None:
    """Checked on the server's sockets: the timing test above cannot see Nagle's delay when a
    response goes out in one write, but a streamed watch or a client that splits its writes
    would pay about 40 ms per exchange without TCP_NODELAY."""
    watch = open_watch(core, timeout=5)
    idle = connection(sim)
    try:
        idle.request("GET", "/version")
        assert idle.getresponse().read()
        server = sim._server
        assert server is not None
        with server._conn_lock:
            sockets = list(server._conns.values())
        assert len(sockets) == 2  # the watch and the keep-alive connection
        for sock in sockets:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        idle.close()
        watch.close()


def test_delete_reads_the_body_and_keeps_the_connection_usable(sim: KubeSim) -> None:
    conn = connection(sim)
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


@pytest.mark.kubesim_only(
    reason=(
        "kube-apiserver's Go HTTP server answers a malformed request line with a plain-text "
        "400, not a Status: kubesim's Status body goes beyond it"
    )
)
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
