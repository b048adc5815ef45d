"""Why executors wait, end to end: a sidecar over real HTTP to the simulator, observed over gRPC.

- Executors no node fits carry kube-scheduler's own words ("0/1 nodes are available: 1
  Insufficient cpu. preemption: ...") to the stream with the pod event that says it (no full list
  needed), and the metrics count them; both clear once a node fits.
- Executors whose image cannot be pulled carry the kubelet's back-off to the stream.
- Executors whose Secret does not exist carry the kubelet's FailedMount warning (read from the
  events each poll), until the Secret is made.
- Executors that crash as they start pause requests (the crash-loop brake), which resume on
  their own.
"""

from __future__ import annotations

import time
from typing import Any

from execpods.client import AllocatorClient, ExecutorState, StreamUpdate
from execpods.kubesim import ClusterConfig, KubeSim
from kubernetes import client

from tests.sidecar.capacity_support import collect, notices, sidecar_on
from tests.sidecar.conftest import SidecarOnFactory, creates, running_ids, wait_for
from tests.sidecar.test_observability import METRICS_CONF, scrape_until, value


def test_unschedulable_executors_carry_the_schedulers_words_and_clear_once_a_node_fits(
    make_sidecar_on: SidecarOnFactory,
) -> None:
    # One node of 2 cores: two executors of 1 core fit, the next two do not.
    cluster = ClusterConfig(nodes=1, node_cpu="2", start_latency=0.15, start_jitter=0.1)
    with KubeSim(cluster=cluster) as sim:
        updates: list[StreamUpdate] = []
        with (
            sidecar_on(sim, make_sidecar_on, "unsched", METRICS_CONF) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            collect(iter(stream), updates)
            driver.request_total(4)

            def waiting() -> dict[int, tuple[str, str]]:
                latest = next((u.latest for u in reversed(list(updates)) if u.latest), None)
                if latest is None:
                    return {}
                return {
                    i: (e.pending_reason, e.pending_message)
                    for i, e in latest.executors.items()
                    if e.state is ExecutorState.PENDING and e.pending_reason
                }

            stuck = wait_for(lambda: len(waiting()) == 2 and waiting(), what="two unschedulable")
            for reason, message in stuck.values():
                assert reason == "unschedulable"
                assert message.startswith(
                    "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu. preemption: "
                ), message
            # and the metrics count them by reason, every reason shown
            address = sidecar.server.ops.metrics_address
            counted = scrape_until(
                address,
                lambda s: value(s, "execpods_executors_waiting", reason="Unschedulable") == 2,
                "two Unschedulable in the metrics",
            )
            assert value(counted, "execpods_executors_waiting", reason="ImagePull") == 0
            assert ("execpods_executors_waiting", (("reason", "FailedMount"),)) in counted
            # "within a poll": the reason came with the pod event, before any full list
            seen_at = time.monotonic()
            sim.add_node()
            wait_for(lambda: len(running_ids(sim, "unsched")) == 4, what="all four running")
            wait_for(lambda: not waiting(), what="the reasons cleared")
            scrape_until(
                address,
                lambda s: value(s, "execpods_executors_waiting", reason="Unschedulable") == 0,
                "the metric cleared",
            )
            assert time.monotonic() - seen_at < 30.0


def test_an_image_that_cannot_be_pulled_is_why_executors_wait(
    make_sidecar_on: SidecarOnFactory,
) -> None:
    image = "apache/spark:no-such-tag"
    cluster = ClusterConfig(start_latency=0.15, start_jitter=0.1, image_pull_failures=(image,))
    with KubeSim(cluster=cluster) as sim:
        updates: list[StreamUpdate] = []
        conf = {"spark.kubernetes.container.image": image, **METRICS_CONF}
        with (
            sidecar_on(sim, make_sidecar_on, "pull", conf) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            collect(iter(stream), updates)
            driver.request_total(2)

            def pulling() -> list[str]:
                latest = next((u.latest for u in reversed(list(updates)) if u.latest), None)
                return [
                    e.pending_message
                    for e in (latest.executors.values() if latest is not None else ())
                    if e.pending_reason == "image_pull"
                ]

            messages = wait_for(lambda: len(pulling()) == 2 and pulling(), what="two pulling")
            assert all(image in m for m in messages), messages
            assert all(
                m.startswith(("ErrImagePull: container ", "ImagePullBackOff: container "))
                for m in messages
            ), messages
            scrape_until(
                sidecar.server.ops.metrics_address,
                lambda s: value(s, "execpods_executors_waiting", reason="ImagePull") == 2,
                "two ImagePull in the metrics",
            )


def test_a_crash_loop_pauses_requests_and_they_resume_on_their_own(
    make_sidecar_on: SidecarOnFactory,
) -> None:
    """Every executor exits 1 half a second after it starts (the node simulation's exit-after):
    past 10 start failures in a minute the brake pauses requests (no create while paused), and
    they resume on their own; nothing fails the application."""
    with KubeSim(cluster=ClusterConfig(start_latency=0.15, start_jitter=0.1)) as sim:
        updates: list[StreamUpdate] = []
        conf = {
            "spark.kubernetes.executor.annotation.kubesim.execpods.io/exit-after": "0.5",
            "spark.kubernetes.executor.annotation.kubesim.execpods.io/exit-code": "1",
            "spark.executor.maxNumFailures": "1000",
            "execpods.crashLoop.retryInterval": "2s",
        }
        with (
            sidecar_on(sim, make_sidecar_on, "loop", conf) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            collect(iter(stream), updates)
            driver.request_total(12)
            paused = wait_for(lambda: notices(updates, "crash_loop_paused"), what="a pause")
            assert "executors failed at start within the last minute" in paused[0]
            assert "exited with code 1" in paused[0]
            during = creates(sim)
            time.sleep(1.0)  # within the 2 s pause
            assert creates(sim) == during, "no create while paused"
            wait_for(lambda: notices(updates, "crash_loop_resumed"), what="the resume")
            wait_for(lambda: creates(sim) > during, what="requests again after the pause")
            assert not any(u.application_failure for u in list(updates))


def test_a_missing_secret_is_why_executors_wait_until_it_exists(
    make_sidecar_on: SidecarOnFactory,
) -> None:
    """Spark's executor secret names one that does not exist: the kubelet's FailedMount warning
    reaches the stream within a poll, and clears once the Secret is made."""
    with KubeSim(cluster=ClusterConfig(start_latency=0.15, start_jitter=0.1)) as sim:
        updates: list[StreamUpdate] = []
        conf = {
            "spark.kubernetes.executor.secrets.spark-conf": "/etc/spark-conf",
            "spark.kubernetes.executor.apiPollingInterval": "200ms",
        }
        with (
            sidecar_on(sim, make_sidecar_on, "mount", conf) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            collect(iter(stream), updates)
            driver.request_total(1)

            def mounting() -> list[str]:
                latest = next((u.latest for u in reversed(list(updates)) if u.latest), None)
                return [
                    e.pending_message
                    for e in (latest.executors.values() if latest is not None else ())
                    if e.pending_reason == "failed_mount"
                ]

            (message,) = wait_for(mounting, what="the FailedMount reason")
            assert message == (
                'FailedMount: MountVolume.SetUp failed for volume "spark-conf-volume" : '
                'secret "spark-conf" not found'
            )
            core: Any = client.CoreV1Api(client.ApiClient(client.Configuration(host=sim.url)))
            core.create_namespaced_secret("default", {"metadata": {"name": "spark-conf"}})
            wait_for(lambda: running_ids(sim, "mount") == {1}, timeout=150.0, what="it runs")
            wait_for(lambda: not mounting(), what="the reason cleared")
