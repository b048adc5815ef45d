"""The poll source (Spark's ExecutorPodsPollingSnapshotSourceSuite, SPARK-24248, over HTTP)."""

from __future__ import annotations

import logging

import pytest
from execpods.core import (
    SPARK_LABELS,
    CoreSettings,
    DeterministicScheduler,
    ExecutorPod,
    ExecutorState,
    PodSelector,
)
from execpods.k8s import ApiGateway, KubernetesApiClient, KubernetesPodOperations, PollSource
from execpods.kubesim import KubeSim

from tests.k8s.conftest import APP_ID, RecordingStore, executor_pod, mislabelled_executor_pods

CORE = CoreSettings()
INTERVAL = CORE.api_polling_interval


def running_executors(sim: KubeSim, *ids: int) -> None:
    for executor_id in ids:
        sim.create_pod(executor_pod(executor_id))
    sim.run_until_idle()


def started(
    store: RecordingStore,
    operations: KubernetesPodOperations,
    *,
    core_settings: CoreSettings | None = None,
) -> tuple[PollSource, DeterministicScheduler]:
    """A poll source started on a scheduler the test ticks."""
    scheduler = DeterministicScheduler()
    source = PollSource(store, operations, core_settings=core_settings, scheduler=scheduler)
    source.start(APP_ID)
    return source, scheduler


def test_items_returned_by_the_api_are_pushed_to_the_store(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    running_executors(sim, 1, 2)
    sim.create_pod(executor_pod(1, app_id="another-app"))
    source, scheduler = started(store, operations)
    scheduler.tick(INTERVAL - 0.001)
    assert store.replacements == []
    scheduler.tick(0.001)
    (listed,) = store.replacements
    assert sorted(p.name for p in listed) == [f"{APP_ID}-exec-1", f"{APP_ID}-exec-2"]
    snapshot = store.current_snapshot
    assert {i: s.state for i, s in snapshot.items()} == {
        1: ExecutorState.RUNNING,
        2: ExecutorState.RUNNING,
    }
    scheduler.tick(INTERVAL)
    assert len(store.replacements) == 2
    source.stop()
    scheduler.tick(INTERVAL * 3)
    assert len(store.replacements) == 2


def test_starting_twice_is_an_error(
    operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    source, _ = started(store, operations)
    with pytest.raises(RuntimeError, match=r"Cannot start polling more than once\."):
        source.start(APP_ID)
    source.stop()


def test_a_failed_list_is_logged_and_retried(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    store: RecordingStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running_executors(sim, 1)
    source, scheduler = started(store, operations)
    sim.fail_requests(503, count=1)
    with caplog.at_level(logging.WARNING, logger="execpods.k8s.poll"):
        scheduler.tick(INTERVAL)
    assert store.replacements == []
    assert source.failures == 1
    assert any("503" in r.getMessage() for r in caplog.records)
    scheduler.tick(INTERVAL)
    assert len(store.replacements) == 1
    source.stop()


def test_spark_36334_pod_listing_with_resource_version(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    core = CoreSettings(enable_polling_with_resource_version=True)
    source, scheduler = started(store, operations, core_settings=core)
    scheduler.tick(INTERVAL)
    (request,) = sim.requests()
    assert request.verb == "list"
    assert request.query["resourceVersion"] == "0"
    assert "spark-app-selector=spark-app-1" in request.query["labelSelector"]
    source.stop()


def test_without_resource_version_polling_lists_are_quorum_reads(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    source, scheduler = started(store, operations)
    scheduler.tick(INTERVAL)
    (request,) = sim.requests()
    assert "resourceVersion" not in request.query
    source.stop()


def test_inactive_pods_are_left_out_of_the_list(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    running_executors(sim, 1, 2)
    operations.patch_labels(f"{APP_ID}-exec-2", {"spark-exec-inactive": "true"})
    source, scheduler = started(store, operations)
    scheduler.tick(INTERVAL)
    (request,) = [r for r in sim.requests() if r.verb == "list"]
    assert "spark-exec-inactive!=true" in request.query["labelSelector"]
    (listed,) = store.replacements
    assert [p.name for p in listed] == [f"{APP_ID}-exec-1"]
    source.stop()


class _ReplayingOperations(KubernetesPodOperations):
    """The real operations, except that the next list answers with one recorded earlier: what a
    lagging API server cache can do with resourceVersion=0."""

    replay: tuple[list[ExecutorPod], str | None] | None = None

    def list_with_version(
        self,
        label_selector: str,
        field_selector: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> tuple[list[ExecutorPod], str | None]:
        if self.replay is not None:
            replayed, self.replay = self.replay, None
            return replayed
        return super().list_with_version(
            label_selector, field_selector, resource_version=resource_version
        )


def test_a_cached_list_older_than_the_last_one_applied_is_replaced_by_a_quorum_list(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    running_executors(sim, 1)
    replaying = _ReplayingOperations(operations.gateway)
    selector = PodSelector.active_executors_of(SPARK_LABELS, APP_ID).label_selector()
    old = replaying.list_with_version(selector, resource_version="0")
    running_executors(sim, 2)
    core = CoreSettings(enable_polling_with_resource_version=True)
    source, scheduler = started(store, replaying, core_settings=core)
    scheduler.tick(INTERVAL)
    assert {p.name for p in store.replacements[-1]} == {f"{APP_ID}-exec-1", f"{APP_ID}-exec-2"}
    replaying.replay = old
    scheduler.tick(INTERVAL)
    # The older list never moves the snapshot back: a quorum list (never stale) replaces it.
    assert len(store.replacements) == 2
    assert {p.name for p in store.replacements[-1]} == {f"{APP_ID}-exec-1", f"{APP_ID}-exec-2"}
    assert source.stale == 1
    assert source.went_back == 0
    requests = [r for r in sim.requests() if r.verb == "list"]
    assert "resourceVersion" not in requests[-1].query, "the second list is a quorum read"
    source.stop()


def test_polling_can_be_disabled(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    core = CoreSettings(enable_api_polling=False)
    source, scheduler = started(store, operations, core_settings=core)
    scheduler.tick(INTERVAL * 3)
    assert sim.requests() == []
    source.stop()


def test_the_default_scheduler_polls_on_its_own_thread(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    running_executors(sim, 1)
    core = CoreSettings.from_properties({"spark.kubernetes.executor.apiPollingInterval": "20ms"})
    source = PollSource(store, operations, core_settings=core)
    source.start(APP_ID)
    assert store.wait_for(lambda s: len(s.replacements) >= 2)
    source.stop()


def test_listed_pods_with_missing_or_malformed_labels_are_skipped_with_a_warning(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    store: RecordingStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running_executors(sim, 1)
    for pod in mislabelled_executor_pods():
        sim.create_pod(pod)
    source, scheduler = started(store, operations)
    with caplog.at_level(logging.WARNING):
        scheduler.tick(INTERVAL)
    assert set(store.current_snapshot) == {1}
    messages = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "no-id" in messages
    assert "bad-id" in messages
    assert source.failures == 0
    scheduler.tick(INTERVAL)  # and the poll goes on
    assert len(store.replacements) == 2
    source.stop()


def test_a_timed_out_poll_is_logged_and_the_next_one_runs(
    sim: KubeSim,
    api_client: KubernetesApiClient,
    store: RecordingStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running_executors(sim, 1)
    sim.set_latency(0.3)  # slower than the client's timeout: a transport failure, not an answer
    slow = KubernetesPodOperations(ApiGateway(api_client, namespace="default", request_timeout=0.1))
    source, scheduler = started(store, slow)
    with caplog.at_level(logging.WARNING, logger="execpods.k8s.poll"):
        scheduler.tick(INTERVAL)
    assert source.failures == 1
    assert any("Timeout" in r.getMessage() for r in caplog.records), caplog.records
    sim.set_latency(0)
    scheduler.tick(INTERVAL)
    assert [p.name for p in store.replacements[-1]] == [f"{APP_ID}-exec-1"]
    source.stop()
