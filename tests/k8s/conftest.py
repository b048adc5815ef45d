"""Fixtures: a simulator over real HTTP, the real client, and a store tests can wait on."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from execpods.core import (
    Clock,
    DeterministicScheduler,
    ExecutorLabels,
    ExecutorPod,
    ExecutorPodsSnapshot,
    PodClassifier,
)
from execpods.core.ports import ListMark
from execpods.core.store import ScheduledSnapshotsStore
from execpods.core.testing import composed_store
from execpods.k8s import (
    ApiGateway,
    ExecutorPodTemplateBuilder,
    KubernetesApiClient,
    KubernetesPodOperations,
    KubernetesSettings,
    connect,
)
from execpods.kubesim import KubeSim

APP_ID = "spark-app-1"
IMAGE = "spark:test"
WAIT = 10.0


class RecordingStore(ScheduledSnapshotsStore):
    """A real store that also records what the sources pushed and lets a test wait on it."""

    def __init__(self, *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock) -> None:
        super().__init__(
            DeterministicScheduler(), labels=labels, classifier=classifier, clock=clock
        )
        self.updates: list[ExecutorPod] = []
        self.replacements: list[list[ExecutorPod]] = []
        self._cond = threading.Condition()

    def update_pod(self, pod: ExecutorPod) -> None:
        super().update_pod(pod)
        with self._cond:
            self.updates.append(pod)
            self._cond.notify_all()

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        listed = list(pods)
        super().replace_snapshot(listed, since=since)
        with self._cond:
            self.replacements.append(listed)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[RecordingStore], bool], timeout: float = WAIT) -> bool:
        """Block until `predicate(self)` holds after a push (bounded; no sleeping)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def wait_snapshot(
        self, predicate: Callable[[ExecutorPodsSnapshot], bool], timeout: float = WAIT
    ) -> bool:
        return self.wait_for(lambda s: predicate(s.current_snapshot), timeout)


def executor_pod(executor_id: int, app_id: str = APP_ID, **labels: str) -> dict[str, Any]:
    """A minimal executor pod manifest as a driver would create it."""
    all_labels = {
        "spark-app-selector": app_id,
        "spark-role": "executor",
        "spark-exec-id": str(executor_id),
        **labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app_id}-exec-{executor_id}", "labels": all_labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "spark-kubernetes-executor", "image": IMAGE}],
        },
    }


def built_executor_pod(
    properties: dict[str, str], template: dict[str, Any] | None = None, *, executor_id: int = 1
) -> dict[str, Any]:
    """The builder's manifest for executor `executor_id` of app `app` under these properties."""
    settings = KubernetesSettings.from_properties(
        {"spark.kubernetes.container.image": IMAGE, **properties}
    )
    builder = ExecutorPodTemplateBuilder(
        settings=settings, namespace="default", template=template or {}
    )
    return builder.build(executor_id=executor_id, app_id="app")


def mislabelled_executor_pods() -> list[dict[str, Any]]:
    """The app's pods that are no executor the core can use: "no-id" lacks the spark-exec-id
    label, "bad-id" has one that is not a number."""
    no_id = executor_pod(101)
    del no_id["metadata"]["labels"]["spark-exec-id"]
    no_id["metadata"]["name"] = "no-id"
    bad_id = executor_pod(102, **{"spark-exec-id": "two"})
    bad_id["metadata"]["name"] = "bad-id"
    return [no_id, bad_id]


def free_port() -> int:
    """A loopback port nobody listens on (once the probe is closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(deterministic=True) as simulator:
        yield simulator


@pytest.fixture
def api_client(sim: KubeSim) -> Iterator[KubernetesApiClient]:
    client = connect(api_url=sim.url)
    yield client
    client.close()


@pytest.fixture
def operations(api_client: KubernetesApiClient) -> KubernetesPodOperations:
    # Creates over the lean transport, as the sidecar makes them (test_transport.py also runs
    # them over the official client).
    gateway = ApiGateway(api_client, namespace="default", request_timeout=5, create_pool=4)
    return KubernetesPodOperations(gateway)


@pytest.fixture
def store() -> Iterator[RecordingStore]:
    recording = composed_store(RecordingStore)
    yield recording
    recording.stop()


def eventually(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    """For state with no notification to wait on (the simulator logs a watch when it ends)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.005)
    return True


FAST = KubernetesSettings(backoff_initial=0.01, backoff_max=0.1, container_image=IMAGE)
"""Real-time tests back off in milliseconds, so recoveries take no noticeable time."""
