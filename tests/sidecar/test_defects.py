"""Defects found by probing the sidecar (issue 11), each proved on a real sidecar over kubesim.

A failed start touches nothing; a pod whose id label is beyond 64 bits is skipped, not fatal to
every stream; large kills go in chunks with bounded messages; a Unix socket in use is refused;
requests beyond the documented caps are INVALID_ARGUMENT.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import tempfile
from typing import Any

import grpc
import pytest
from execpods.client import AllocatorClient, ExecutorState
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.sidecar.conftest import SidecarFactory, app_pods, reserve_ids, running_ids, wait_for
from tests.sidecar.serve_process import serve


def _running(client: AllocatorClient, count: int) -> None:
    with client.stream_snapshots() as stream:
        for update in stream:
            if update.latest is not None and update.latest.count(ExecutorState.RUNNING) == count:
                return


def test_a_sidecar_that_cannot_bind_touches_nothing_in_the_cluster(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    live = make_sidecar("twice", conf={"spark.executor.instances": "3"})
    wait_for(lambda: running_ids(sim, "twice") == {1, 2, 3}, what="three running")
    sim.clear_requests()
    second = EmbeddedSidecar(
        simulator_properties(sim.url, "twice", **{"execpods.sidecar.listen": live.address})
    )
    with pytest.raises(OSError, match="cannot listen"):
        second.start()
    second.stop()
    touched = [r for r in sim.requests() if r.method not in ("GET",)]
    assert touched == []
    assert running_ids(sim, "twice") == {1, 2, 3}
    with AllocatorClient(live.address) as client:
        assert client.request_total(3).total == 3  # the live sidecar is unharmed


def test_a_unix_socket_in_use_is_refused_and_a_stale_one_is_taken(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    with tempfile.TemporaryDirectory(prefix="execpods-", dir="/tmp") as folder:
        address = f"unix:{folder}/sidecar.sock"
        live = make_sidecar("sock", conf={"execpods.sidecar.listen": address})
        second = EmbeddedSidecar(
            simulator_properties(sim.url, "sock", **{"execpods.sidecar.listen": address})
        )
        with pytest.raises(OSError, match="another server accepts connections"):
            second.start()
        second.stop()
        with AllocatorClient(address) as client:
            assert client.request_total(1).total == 1  # still reachable: the socket is its own
        wait_for(lambda: running_ids(sim, "sock") == {1}, what="one running")
        live.stop()
        # A socket file left behind by a process that died is stale: a new sidecar takes it.
        import socket

        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(f"{folder}/stale.sock")
        stale.close()
        third = make_sidecar("sock2", conf={"execpods.sidecar.listen": f"unix:{folder}/stale.sock"})
        with AllocatorClient(third.address) as client:
            assert client.request_total(0).total == 0


def _huge_id_pod(app_id: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{app_id}-exec-huge",
            "labels": {
                "spark-app-selector": app_id,
                "spark-role": "executor",
                "spark-exec-id": "99999999999999999999",
            },
        },
        "spec": {"containers": [{"name": "spark-executor", "image": "x"}]},
    }


def test_a_pod_with_an_id_beyond_64_bits_is_skipped_and_streams_work(
    sim: KubeSim, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sim.create_pod(_huge_id_pod("huge"))
    caplog.set_level(logging.WARNING)
    sidecar = make_sidecar("huge")
    with AllocatorClient(sidecar.address) as client:
        client.request_total(2)
        _running(client, 2)  # a stream opened with the pod there, and followed to the end
        with client.stream_snapshots() as stream:  # and a new one opens
            first = next(iter(stream))
            assert first.latest is not None
            assert set(first.latest.executors) == {1, 2}
    assert "beyond 64 bits" in caplog.text


def test_a_kill_of_ten_thousand_ids_goes_in_bounded_requests(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    reserve_ids(sim, "bulk", 9_998)  # the two executors are 9,999 and 10,000
    sidecar = make_sidecar("bulk", conf={"spark.executor.instances": "2"})
    wait_for(lambda: len(running_ids(sim, "bulk")) == 2, what="two running")
    sim.clear_requests()
    with AllocatorClient(sidecar.address) as client:
        assert client.kill_executors(range(1, 10_001)) == 2
    deletes = [r for r in sim.requests() if r.method == "DELETE"]
    assert len(deletes) == 20  # 500 ids a request
    assert max(len(r.query.get("labelSelector", "")) for r in deletes) < 8_000
    wait_for(lambda: not running_ids(sim, "bulk"), what="both killed")


def test_a_failed_kill_of_many_ids_reports_a_bounded_message(
    sim: KubeSim, make_sidecar: SidecarFactory, caplog: pytest.LogCaptureFixture
) -> None:
    reserve_ids(sim, "bulkfail", 5_000)
    sidecar = make_sidecar("bulkfail")
    wait_for(lambda: sidecar.runtime.backend.highest_executor_id() == 5_000, what="the ledger")
    sim.fail_requests(500, seconds=30)
    caplog.set_level(logging.INFO)
    with AllocatorClient(sidecar.address) as client, pytest.raises(grpc.RpcError) as failed:
        client.kill_executors(range(1, 5_001))
    # The sidecar's own answer (an outage: UNAVAILABLE, or RESOURCE_EXHAUSTED while the API
    # gateway backs off), not gRPC refusing a status too large to send (RESOURCE_EXHAUSTED too).
    details = failed.value.details() or ""
    assert "could not delete the pods" in details
    assert "495 more" in details
    assert len(details) < 2_000
    assert max(len(r.getMessage()) for r in caplog.records) < 3_000
    sim.clear_faults()


@pytest.mark.parametrize(
    ("conf", "total", "named"),
    [
        ({}, 2**31 - 1, "execpods.allocation.maxTotal=10000"),
        ({"execpods.allocation.maxTotal": "50"}, 51, "execpods.allocation.maxTotal=50"),
    ],
    ids=["default-cap", "configured-cap"],
)
def test_a_total_beyond_the_maximum_is_invalid(
    sim: KubeSim, make_sidecar: SidecarFactory, conf: dict[str, str], total: int, named: str
) -> None:
    sidecar = make_sidecar("cap", conf=conf)
    with AllocatorClient(sidecar.address) as client:
        with pytest.raises(grpc.RpcError) as refused:
            client.request_total(total)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert named in (refused.value.details() or "")
        assert client.request_total(0).total == 0
    assert app_pods(sim, "cap") == []


def test_an_interval_beyond_the_maximum_is_invalid(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("interval", conf={"execpods.sidecar.stream.maxBatchInterval": "2s"})
    with AllocatorClient(sidecar.address) as client:
        with pytest.raises(grpc.RpcError) as refused:
            next(iter(client.stream_snapshots(batch_interval_ms=2_001)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "maxBatchInterval" in (refused.value.details() or "")
        with client.stream_snapshots(batch_interval_ms=2_000) as stream:
            assert next(iter(stream)).latest is not None


@pytest.mark.parametrize("outage_s", [1.5, None], ids=["outage-ends-in-grace", "outage-outlasts"])
def test_sigterm_during_an_api_outage_retries_the_deletion_within_the_grace(
    sim: KubeSim, outage_s: float | None
) -> None:
    app_id = "outage"
    with serve(
        sim,
        app_id,
        "--image",
        "spark:test",
        "--initial-executors",
        "3",
        "--conf",
        "spark.kubernetes.allocation.batch.delay=150ms",
        "--conf",
        "execpods.shutdown.deleteGrace=4s",
        # The shared back-off's jittered delay doubles with each failed delete (0.5 s, 1 s, ...
        # up to 8 s after four): it once held the delete past this short grace though the outage
        # had ended. Capped at 1 s here, the retries in the grace are this test's subject.
        "--conf",
        "execpods.kubernetes.backoffMax=1s",
        stderr=subprocess.PIPE,
    ) as (process, _):
        assert process.stderr is not None
        wait_for(lambda: running_ids(sim, app_id) == {1, 2, 3}, what="three running")
        sim.clear_requests()
        sim.fail_requests(503, seconds=outage_s)
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
        stderr = process.stderr.read()
    sim.clear_faults()
    deletes = [r for r in sim.requests() if r.method == "DELETE"]
    assert len(deletes) >= 2  # retried, not one attempt
    if outage_s is not None:
        assert code == 0, stderr
        assert deletes[-1].status == 200
        wait_for(lambda: not app_pods(sim, app_id), what="the executor pods to be gone")
    else:
        assert code == 1
        assert "could not delete the executor pods of application outage" in stderr
        assert "may be left" in stderr
        assert running_ids(sim, app_id) == {1, 2, 3}
