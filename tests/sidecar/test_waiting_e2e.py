"""Why executors wait, end to end: a sidecar over real HTTP to the simulator, observed over gRPC.

Executors no node fits carry the scheduler's words to the stream with the pod event that says it
(no full list needed), and the reason clears once a node fits.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
from execpods.client import AllocatorClient, ExecutorState, StreamUpdate
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar
from kubernetes import client

from tests.sidecar.conftest import SidecarOnFactory, running_ids, wait_for

QUOTA = "spark-quota"


def _collect(stream: Iterator[StreamUpdate], into: list[StreamUpdate]) -> threading.Thread:
    def run() -> None:
        try:
            for update in stream:
                into.append(update)
        except grpc.RpcError:
            pass  # the stream ends when the client closes

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _notices(updates: list[StreamUpdate], kind: str) -> list[str]:
    return [n.message for u in list(updates) for n in u.notices if n.kind == kind]


def _refused_creates(sim: KubeSim) -> list[float]:
    """When each pod create the quota refused was answered (simulator clock)."""
    return [
        r.at
        for r in sim.requests()
        if r.verb == "create" and r.path.endswith("/pods") and r.status == 403
    ]


def _core(sim: KubeSim) -> Any:
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=sim.url)))


@contextlib.contextmanager
def _sidecar_on(
    sim: KubeSim, make_sidecar_on: SidecarOnFactory, app_id: str, conf: dict[str, str]
) -> Iterator[EmbeddedSidecar]:
    """A sidecar stopped while its simulator still serves (its stop deletes the pods)."""
    sidecar = make_sidecar_on(sim, app_id, conf=conf)
    try:
        yield sidecar
    finally:
        sidecar.stop()


def test_unschedulable_executors_carry_the_schedulers_words_and_clear_once_a_node_fits(
    make_sidecar_on: SidecarOnFactory,
) -> None:
    cluster = ClusterConfig(nodes=1, pods_per_node=2, start_latency=0.15, start_jitter=0.1)
    with KubeSim(cluster=cluster) as sim:
        updates: list[StreamUpdate] = []
        with (
            _sidecar_on(sim, make_sidecar_on, "unsched", {}) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            _collect(iter(stream), updates)
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
                assert message.startswith("Unschedulable: 0/1 nodes are available")
            # "within a poll": the reason came with the pod event, before any full list
            seen_at = time.monotonic()
            sim.add_node()
            wait_for(lambda: len(running_ids(sim, "unsched")) == 4, what="all four running")
            wait_for(lambda: not waiting(), what="the reasons cleared")
            assert time.monotonic() - seen_at < 30.0
