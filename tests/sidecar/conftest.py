"""Fixtures: a real-clock simulator with quick latencies, and in-process sidecars in front of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from execpods.client import ExecutorRemoval, StreamUpdate
from execpods.devtools.simulated import simulator_properties
from execpods.k8s import connect
from execpods.k8s.ledger import DATA_KEY, ledger_config_map_name
from execpods.kubesim import ClusterConfig, KubeSim, Pod
from execpods.sidecar.embedded import EmbeddedSidecar
from kubernetes import client as k8s_client

FAST_CLUSTER = ClusterConfig(start_latency=0.15, start_jitter=0.1, stop_latency=0.05)
"""Quick enough that a test of a few batches takes about a second."""

SLOW_STOP = ClusterConfig(start_latency=0.15, start_jitter=0.1, stop_latency=30.0)
"""Executors that take their whole grace period (30 s) to stop after SIGTERM: a killed pod stays
Terminating to be seen."""

SidecarFactory = Callable[..., EmbeddedSidecar]


POLL_S = 0.02


class _Poll:
    """One bounded wait: `check()` is `condition()`'s value; past the deadline a falsy one fails."""

    def __init__(self, condition: Callable[[], Any], timeout: float, what: str) -> None:
        self._condition = condition
        self._timeout = timeout
        self._what = what or str(condition)
        self._deadline = time.monotonic() + timeout

    def check(self) -> Any:
        value = self._condition()
        if not value and time.monotonic() > self._deadline:
            pytest.fail(f"timed out after {self._timeout} s waiting for {self._what}")
        return value


def wait_for(condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "") -> Any:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    poll = _Poll(condition, timeout, what)
    while not (value := poll.check()):
        time.sleep(POLL_S)
    return value


async def wait_for_async(
    condition: Callable[[], Any], *, timeout: float = 20.0, what: str = ""
) -> Any:
    """`wait_for` inside an event loop: the loop keeps running between polls."""
    poll = _Poll(condition, timeout, what)
    while not (value := poll.check()):
        await asyncio.sleep(POLL_S)
    return value


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(cluster=FAST_CLUSTER) as simulator:
        yield simulator


@pytest.fixture
def slow_stop_sim() -> Iterator[KubeSim]:
    """A simulator whose executors stop slowly (SLOW_STOP)."""
    with KubeSim(cluster=SLOW_STOP) as simulator:
        yield simulator


SidecarOnFactory = Callable[..., EmbeddedSidecar]


@pytest.fixture
def make_sidecar_on() -> Iterator[SidecarOnFactory]:
    """Start sidecars on a given simulator: `make_sidecar_on(sim, app_id, conf={...})`."""
    started: list[EmbeddedSidecar] = []

    def make(
        sim: KubeSim,
        app_id: str = "test-app",
        *,
        clock: Any = None,
        conf: dict[str, str] | None = None,
    ) -> EmbeddedSidecar:
        props = simulator_properties(
            sim.url,
            app_id,
            **{
                "spark.executor.instances": "0",
                "spark.kubernetes.allocation.batch.delay": "150ms",
                "spark.kubernetes.executor.eventProcessingInterval": "100ms",
                **(conf or {}),
            },
        )
        sidecar = EmbeddedSidecar(props, clock=clock)
        sidecar.start()
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in reversed(started):
        sidecar.stop()


@pytest.fixture
def make_sidecar(sim: KubeSim, make_sidecar_on: SidecarOnFactory) -> SidecarFactory:
    """Start sidecars on `sim`: `make_sidecar(app_id, conf={...})`; all stopped at the end."""

    def make(
        app_id: str = "test-app", *, clock: Any = None, conf: dict[str, str] | None = None
    ) -> EmbeddedSidecar:
        return make_sidecar_on(sim, app_id, clock=clock, conf=conf)

    return make


def app_pods(sim: KubeSim, app_id: str) -> list[Pod]:
    return [
        pod
        for pod in sim.pods()
        if pod["metadata"].get("labels", {}).get("spark-app-selector") == app_id
    ]


def running_ids(sim: KubeSim, app_id: str) -> set[int]:
    return {
        int(pod["metadata"]["labels"]["spark-exec-id"])
        for pod in app_pods(sim, app_id)
        if pod.get("status", {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    }


def reserve_ids(sim: KubeSim, app_id: str, through: int) -> None:
    """The id ledger as an earlier life left it: ids up to `through` were issued. What a driver
    says of ids never issued is not kept (issue 32), so a test about executors of an earlier
    life says first that they existed."""
    core = k8s_client.CoreV1Api(connect(api_url=sim.url))
    name = ledger_config_map_name(app_id)
    body = k8s_client.V1ConfigMap(
        metadata=k8s_client.V1ObjectMeta(name=name), data={DATA_KEY: str(through)}
    )
    core.create_namespaced_config_map("default", body)


def live_subscriptions(sidecar: EmbeddedSidecar) -> int:
    """How many live subscriptions (snapshots and removals, cancelled as one) the backend has."""
    return sidecar.runtime.backend.subscription_count


def creates(sim: KubeSim) -> int:
    """Pod creates sent (the id ledger's ConfigMap create is no executor)."""
    return sum(1 for r in sim.requests() if r.verb == "create" and r.path.endswith("/pods"))


def collect_updates(
    stream: Iterator[StreamUpdate], into: list[StreamUpdate], until: Callable[[], bool]
) -> None:
    """Read the stream into `into` until `until()` holds (the sidecars here poll every 100 ms,
    so messages keep coming; the test's timeout bounds the wait)."""
    for update in stream:
        into.append(update)
        if until():
            return


def removals(updates: list[StreamUpdate]) -> list[ExecutorRemoval]:
    """Every removal the updates carried, in order."""
    return [r for u in updates for r in u.removed]
