"""Issue 20's defects 12, 14 and 15 on a real sidecar over kubesim (each fails on fde8f25).

12: a call the back-off gate holds during an outage answers UNAVAILABLE (docs/sidecar.md), not
    RESOURCE_EXHAUSTED, which a driver reads as a quota and does not retry;
14: deleted counts (the reply and `execpods_pods_deleted_total`) count each pod once, however
    often it is deleted while it terminates;
15: a second SIGTERM after the first is ignored until the process has exited, so its exit code
    (1 when pods were left) is never masked by 143.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from execpods.client import AllocatorClient
from execpods.kubesim import ClusterConfig, KubeSim

from tests.sidecar.conftest import SidecarOnFactory, running_ids, wait_for
from tests.sidecar.serve_process import serve
from tests.sidecar.test_observability import METRICS_CONF, scrape, value

SLOW_STOP = ClusterConfig(start_latency=0.1, start_jitter=0.05, stop_latency=60.0)
"""Killed pods stay terminating (the kubelet takes a minute to stop them): deleted again."""


ONE_QUICK_STOP = {"spark.executor.instances": "1", "execpods.shutdown.deleteGrace": "0"}
"""One executor; the stop tries its delete once (the gate may hold it for half a minute)."""


@pytest.fixture
def slow_stop_sim() -> Iterator[KubeSim]:
    with KubeSim(cluster=SLOW_STOP) as simulator:
        yield simulator


def kill_code(client: AllocatorClient, ids: list[int]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        client.kill_executors(ids)
    return caught.value.code(), caught.value.details() or ""


LONG_BACK_OFF = {
    "execpods.kubernetes.backoffInitial": "20s",
    "execpods.kubernetes.backoffMax": "30s",
    **ONE_QUICK_STOP,
}
"""Once the first failure closes the gate, the next kill is surely held, unsent."""


def kills_in_a_fault(
    sim: KubeSim,
    make_sidecar_on: SidecarOnFactory,
    app_id: str,
    conf: dict[str, str],
    *,
    gated: bool = True,
) -> Callable[[], tuple[grpc.StatusCode, grpc.StatusCode, str]]:
    """A sidecar with executor 1 running; the returned call kills it twice (in the fault the
    test starts) and gives both codes and the second's message; `gated`: the back-off gate held
    the second unsent (an outage; a 429 refuses only its own call)."""
    sidecar = make_sidecar_on(sim, app_id, conf=conf)
    wait_for(lambda: running_ids(sim, app_id) == {1}, what="one running")

    def kill_twice() -> tuple[grpc.StatusCode, grpc.StatusCode, str]:
        with AllocatorClient(sidecar.address) as client:
            first, _ = kill_code(client, [1])  # sent and failed, or already held
            held, details = kill_code(client, [1])
        assert ("was not sent" in details) is gated
        return first, held, details

    return kill_twice


def test_a_kill_held_by_the_back_off_gate_in_an_outage_is_unavailable(
    slow_stop_sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    kill_twice = kills_in_a_fault(slow_stop_sim, make_sidecar_on, "outage", LONG_BACK_OFF)
    slow_stop_sim.fail_requests(503)
    first, held, _ = kill_twice()
    slow_stop_sim.clear_faults()
    assert (first, held) == (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)


def test_a_kill_held_after_refused_connections_is_unavailable(
    slow_stop_sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    sim = slow_stop_sim
    kill_twice = kills_in_a_fault(sim, make_sidecar_on, "refused", LONG_BACK_OFF)
    down = threading.Thread(target=sim.restart, kwargs={"down_seconds": 3.0})
    down.start()  # the API server goes away: its port refuses connections for 3 s
    try:
        wait_for(lambda: refuses(sim.port), what="the API server's port to refuse connections")
        first, held, _ = kill_twice()
    finally:
        down.join(10)
    assert (first, held) == (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)


def refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # reset or timed out while the server goes down: not refusing yet
        return False
    return False


def test_a_kill_held_after_a_429_stays_resource_exhausted(
    slow_stop_sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    # A Retry-After this long is not waited out inside the call: the driver hears it at once,
    # and a 429 holds back only the call it refused, so the second kill is sent and refused too.
    kill_twice = kills_in_a_fault(
        slow_stop_sim, make_sidecar_on, "quota", ONE_QUICK_STOP, gated=False
    )
    slow_stop_sim.throttle(retry_after=30, seconds=60)
    first, second, _ = kill_twice()
    slow_stop_sim.clear_faults()
    assert (first, second) == (grpc.StatusCode.RESOURCE_EXHAUSTED,) * 2


def test_a_pod_deleted_twice_is_counted_once_in_the_reply_and_the_metric(
    slow_stop_sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    sim = slow_stop_sim
    sidecar = make_sidecar_on(sim, "twice", conf={"spark.executor.instances": "3", **METRICS_CONF})
    wait_for(lambda: running_ids(sim, "twice") == {1, 2, 3}, what="three running")
    with AllocatorClient(sidecar.address) as client:
        assert client.kill_executors([1]) == 1
        assert client.kill_executors([1]) == 0  # still terminating: deleted already
        assert client.kill_executors([1, 2]) == 1
    address = sidecar.server.ops.metrics_address
    assert value(scrape(address), "execpods_pods_deleted_total") == 2
    sidecar.stop()
    report = sidecar.server.shutdown_report
    assert report is not None
    # The stop deleted the replacements and executor 3; 1 and 2 were deleted by the kills.
    live = {p["metadata"]["name"] for p in sim.pods() if "deletionTimestamp" in p["metadata"]}
    assert report.deleted == len(live) - 2


def test_a_second_sigterm_after_the_first_is_ignored_and_the_exit_code_kept(
    slow_stop_sim: KubeSim,
) -> None:
    sim = slow_stop_sim
    conf = ["--image", "spark:test", "--conf", "execpods.shutdown.deleteGrace=0"]
    conf += ["--conf", "spark.executor.instances=2"]
    with serve(sim, "sigterm", *conf, stderr=subprocess.DEVNULL) as (process, _):
        wait_for(lambda: len(running_ids(sim, "sigterm")) == 2, what="two running")
        sim.fail_requests(503)  # the stop's delete fails: the process must exit 1
        process.send_signal(signal.SIGTERM)
        # SIGTERM again and again until it exits: each falls in the moments of the stop.
        while True:
            try:
                code = process.wait(0.01)
                break
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)
        sim.clear_faults()
    assert code == 1  # pods were left; never -15 (killed by the default action)
