"""Why an executor waits on a volume: the kubelet's FailedMount warning, read from the events by
the poll over HTTP and attached to the pod by both sources, cleared once the volume mounts."""

from __future__ import annotations

from typing import Any

from execpods.core import (
    CoreSettings,
    DeterministicScheduler,
    PodForbidden,
    PodWarning,
)
from execpods.core.waiting import PendingReason, waiting_for
from execpods.k8s import KubernetesApiClient, KubernetesPodOperations, PodWarnings, PollSource
from execpods.k8s.warnings import newest_warnings
from execpods.kubesim import KubeSim
from kubernetes import client

from tests.k8s.conftest import APP_ID, RecordingStore, executor_pod

INTERVAL = CoreSettings().api_polling_interval


def needs_secret(executor_id: int) -> dict[str, Any]:
    pod = executor_pod(executor_id)
    pod["spec"]["volumes"] = [{"name": "conf", "secret": {"secretName": "spark-conf"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "conf", "mountPath": "/conf"}]
    return pod


def test_a_missing_secret_reaches_the_core_as_failed_mount_within_one_poll_and_clears(
    sim: KubeSim,
    api_client: KubernetesApiClient,
    operations: KubernetesPodOperations,
    store: RecordingStore,
) -> None:
    sim.create_pod(needs_secret(1))
    sim.create_pod(executor_pod(2))
    sim.advance(10)
    warnings = PodWarnings()
    scheduler = DeterministicScheduler()
    source = PollSource(store, operations, scheduler=scheduler, warnings=warnings)
    source.start(APP_ID)
    scheduler.tick(INTERVAL)
    stuck = store.current_snapshot.executor_pods[1]
    why = waiting_for(stuck)
    assert why is not None
    assert why.reason is PendingReason.FAILED_MOUNT
    assert (
        why.message == 'MountVolume.SetUp failed for volume "conf" : secret "spark-conf" not found'
    )
    assert waiting_for(store.current_snapshot.executor_pods[2]) is None  # it runs
    assert store.current_snapshot.executor_pods[2].pod.warning is None

    core: Any = client.CoreV1Api(api_client)
    core.create_namespaced_secret("default", {"metadata": {"name": "spark-conf"}})
    sim.advance(130)  # past the kubelet's longest wait between mount retries
    scheduler.tick(INTERVAL)
    assert waiting_for(store.current_snapshot.executor_pods[1]) is None
    source.stop()


def test_without_permission_to_list_events_the_warnings_are_left_out_once() -> None:
    calls = 0

    def forbidden(selector: str) -> object:
        nonlocal calls
        calls += 1
        raise PodForbidden('events is forbidden: User "x" cannot list resource "events"')

    warnings = PodWarnings()
    warnings.refresh(forbidden)
    warnings.refresh(forbidden)
    assert calls == 1


def test_each_pods_newest_warning_wins_and_odd_events_are_skipped() -> None:
    def event(pod: str, message: str, **times: Any) -> dict[str, Any]:
        return {
            "involvedObject": {"kind": "Pod", "name": pod},
            "reason": "FailedMount",
            "message": message,
            **times,
        }

    found = newest_warnings(
        [
            event("a", "old", lastTimestamp="2026-01-01T00:00:00Z"),
            event("a", "new", lastTimestamp="2026-01-01T00:05:00Z"),
            event("a", "older", lastTimestamp="2026-01-01T00:01:00Z"),
            event("b", "series", series={"lastObservedTime": "2026-01-01T00:00:01.000000Z"}),
            {"involvedObject": {"kind": "Node", "name": "a"}, "reason": "FailedMount"},
            "not an event",
            {"involvedObject": "odd"},
        ]
    )
    assert found == {
        "a": PodWarning(reason="FailedMount", message="new"),
        "b": PodWarning(reason="FailedMount", message="series"),
    }
