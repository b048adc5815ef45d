"""Metrics, health and structured logs of a real sidecar on the simulator.

The Prometheus endpoint is scraped over HTTP while executors come and go; health is asked over
gRPC while the simulator fails every request, and after it stops; the JSON logs are read from a
real `execpods-sidecar serve` process.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import grpc
import pytest
from execpods.client import AllocatorClient, ExecutorState
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar
from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families

from tests.sidecar.conftest import (
    FAST_CLUSTER,
    SidecarFactory,
    app_pods,
    running_ids,
    wait_for,
)
from tests.sidecar.serve_process import serve

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

METRICS_CONF = {
    "execpods.sidecar.metrics.enabled": "true",
    "execpods.sidecar.metrics.port": "0",
}


def scrape(address: str) -> Samples:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape_until(address: str, predicate: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until `predicate` holds for a scrape (bounded); returns that scrape."""
    found: list[Samples] = []

    def check() -> bool:
        samples = scrape(address)
        found[:] = [samples]
        return predicate(samples)

    wait_for(check, what=what)
    return found[0]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def test_metrics_are_off_by_default(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("quiet")
    assert sidecar.server.ops.metrics_address == ""
    assert sidecar.server.ops.metrics is None


def test_a_scrape_follows_executors_as_they_come_and_go(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("metrics", conf=METRICS_CONF)
    address = sidecar.server.ops.metrics_address
    assert address.startswith("127.0.0.1:")
    assert not address.endswith(":0")
    before = scrape(address)
    assert value(before, "execpods_executors", state="running", resource_profile="0") == 0
    assert value(before, "execpods_pods_created_total") == 0

    with AllocatorClient(sidecar.address) as client:
        stream = client.stream_snapshots(batch_interval_ms=50)
        client.request_total(4)
        wait_for(lambda: len(running_ids(sim, "metrics")) == 4, what="4 running")
        during = scrape_until(
            address,
            lambda s: (
                value(s, "execpods_executors", state="running", resource_profile="0") == 4
                and value(s, "execpods_target_reached_seconds_count") == 1
            ),
            "the scrape to show 4 running executors and the target reached",
        )
        assert value(during, "execpods_target_executors", resource_profile="0") == 4
        assert total(
            during, "grpc_server_handled_total", grpc_method="RequestTotal", grpc_code="OK"
        )
        assert total(during, "grpc_server_handling_seconds_count", grpc_method="RequestTotal")
        assert value(during, "execpods_pods_created_total") == 4
        # Four pods, and the id ledger's ConfigMap (no driver pod here) before them.
        assert value(during, "execpods_api_calls_total", verb="create", outcome="success") == 5
        assert value(during, "execpods_api_call_duration_seconds_count", verb="create") == 5
        assert value(during, "execpods_api_calls_total", verb="watch", outcome="success") >= 1
        assert value(during, "execpods_api_calls_total", verb="list", outcome="success") >= 1
        assert value(during, "execpods_round_duration_seconds_count", reconciler="allocator") > 0
        assert value(during, "execpods_round_duration_seconds_count", reconciler="lifecycle") > 0
        assert value(during, "execpods_stream_subscribers") == 1
        assert value(during, "execpods_stream_lag_seconds_count") > 0
        assert value(during, "execpods_target_changes_total") == 1
        reached = value(during, "execpods_target_reached_seconds_sum")
        assert 0 < reached < 20

        assert client.kill_executors([1, 2]) == 2
        sim.reject_creates(403, count=1)  # the replacement's first create is refused
        after_kill = scrape_until(
            address,
            lambda s: (
                value(s, "execpods_pods_refused_total", reason="PodAdmissionRejected") == 1
                and value(s, "execpods_executors", state="running", resource_profile="0") == 4
            ),
            "a refused create, then 4 running again",
        )
        assert value(after_kill, "execpods_pods_deleted_total") == 2
        assert value(after_kill, "execpods_pods_created_total") == 6
        assert (
            total(
                after_kill,
                "execpods_api_calls_total",
                verb="create",
                outcome="PodAdmissionRejected",
            )
            == 1
        )
        removed = scrape_until(
            address,
            lambda s: total(s, "execpods_executor_removals_total", reason="killed_by_driver") == 2,
            "the two killed executors counted as removals",
        )
        assert value(removed, "execpods_executor_failures_total", source="create") == 1
        assert value(removed, "execpods_executor_failures_total", source="pod") == 0
        killed = total(removed, "grpc_server_handled_total", grpc_method="KillExecutors")
        assert (
            killed
            == total(
                removed, "grpc_server_handled_total", grpc_code="OK", grpc_method="KillExecutors"
            )
            == 1
        )
        victim = min(running_ids(sim, "metrics"))
        sim.oom_kill(pod_name(sim, "metrics", victim))
        oom = scrape_until(
            address,
            lambda s: value(s, **OOM_KILLED) == 1,
            "the OOM-killed executor counted as a removal",
        )
        assert value(oom, "execpods_executor_failures_total", source="pod") == 1
        assert value(oom, "execpods_executor_failures_counted") == 2  # the refused create too
        assert value(oom, "execpods_executor_failures_limit") > 0
        assert total(oom, "execpods_build_info", version=metadata.version("execpods-sidecar")) == 1
        stream.cancel()
        scrape_until(
            address,
            lambda s: value(s, "execpods_stream_subscribers") == 0,
            "the stream's subscriber to go",
        )


OOM_KILLED = {"name": "execpods_executor_removals_total", "reason": "exited", "cause": "oom_killed"}


def pod_name(sim: KubeSim, app_id: str, executor_id: int) -> str:
    return next(
        pod["metadata"]["name"]
        for pod in app_pods(sim, app_id)
        if pod["metadata"]["labels"]["spark-exec-id"] == str(executor_id)
    )


def health_status(address: str, service: str = "") -> int:
    """grpc.health.v1 Check over a plaintext channel (by method path: the typed stubs of
    grpcio-health-checking leave the client stub's methods out)."""
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        status: int = check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
        return status


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_health_is_not_serving_while_the_cluster_fails_and_serving_again_after(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("health", conf={"execpods.sidecar.health.checkInterval": "200ms"})
    assert health_status(sidecar.address) == SERVING
    sim.fail_requests(503)
    wait_for(lambda: health_status(sidecar.address) == NOT_SERVING, what="NOT_SERVING")
    assert health_status(sidecar.address, "execpods.v1.ExecutorAllocator") == NOT_SERVING
    sim.clear_faults()
    wait_for(lambda: health_status(sidecar.address) == SERVING, what="SERVING again")
    assert health_status(sidecar.address, "execpods.v1.ExecutorAllocator") == SERVING


def test_health_is_not_serving_once_the_api_server_is_gone() -> None:
    simulator = KubeSim(cluster=FAST_CLUSTER).start()
    props = simulator_properties(
        simulator.url,
        "gone",
        **{
            "execpods.sidecar.health.checkInterval": "200ms",
            # What is asserted is the health; stopping need not retry its deletes for 20 s.
            "execpods.shutdown.deleteGrace": "0",
        },
    )
    with EmbeddedSidecar(props) as sidecar:
        assert health_status(sidecar.address) == SERVING
        simulator.close()
        wait_for(lambda: health_status(sidecar.address) == NOT_SERVING, what="NOT_SERVING")


def test_a_plaintext_health_port_serves_health_only(make_sidecar: SidecarFactory) -> None:
    sidecar = make_sidecar("probe", conf={"execpods.sidecar.health.listen": "127.0.0.1:0"})
    health_address = sidecar.server.ops.health_address
    assert health_address.startswith("127.0.0.1:")
    assert health_address != sidecar.address
    assert health_status(health_address) == SERVING
    with AllocatorClient(health_address) as client, pytest.raises(grpc.RpcError) as caught:
        client.request_total(1)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_json_logs_carry_the_app_id_executor_id_and_reason(sim: KubeSim, tmp_path: Path) -> None:
    log_path = tmp_path / "sidecar.log"
    with (
        log_path.open("w") as log,
        serve(
            sim,
            "jsonlogs",
            "--image",
            "x",
            "--conf",
            "spark.kubernetes.allocation.batch.delay=150ms",
            "--conf",
            "spark.kubernetes.executor.eventProcessingInterval=100ms",
            options=("--log-format", "json", "--log-level", "INFO"),
            stderr=log,
        ) as (process, address),
    ):
        with AllocatorClient(address) as client:
            client.request_total(2)
            with client.stream_snapshots(batch_interval_ms=50) as stream:
                for update in stream:
                    latest = update.latest
                    if latest is not None and latest.count(ExecutorState.RUNNING) == 2:
                        break
                client.kill_executors([1])
                for update in stream:
                    if any(r.executor_id == 1 for r in update.removed):
                        break
        process.terminate()
        assert process.wait(30) == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert lines
    for line in lines:
        assert {"ts", "level", "logger", "message", "app_id"} <= line.keys()
        assert line["app_id"] == "jsonlogs"
        assert line["ts"].endswith("Z")
    removals = [line for line in lines if line.get("executor_id") == 1]
    assert removals, lines
    assert removals[0]["reason"]
    assert "Removing executor 1" in removals[0]["message"]
