"""The seed's KubernetesClusterSchedulerBackendSuite (start, stop, kill, request total)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from execpods.core import (
    CoreSettings,
    DeterministicScheduler,
    ExecutorPodsAllocator,
    ExecutorPodsBackend,
    ManualClock,
    PodSelector,
)
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.store import SnapshotsCallback, Subscription
from execpods.core.testing import (
    TEST_APP_ID,
    DeleteCall,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
)

APP_LABELS = {"spark-app-selector": TEST_APP_ID, "spark-role": "executor"}


class LoggingStore(DeterministicSnapshotsStore):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        owner = type(getattr(callback, "__self__", callback)).__name__
        self.log.append(f"subscribe {owner}")
        return super().add_subscriber(interval, callback)

    def stop(self) -> None:
        self.log.append("store.stop")
        super().stop()


@dataclass
class RecordingSource:
    name: str
    log: list[str]
    fail_on_stop: bool = False
    started_with: list[str] = field(default_factory=list)

    def start(self, app_id: str) -> None:
        self.log.append(f"{self.name}.start")
        self.started_with.append(app_id)

    def stop(self) -> None:
        self.log.append(f"{self.name}.stop")
        if self.fail_on_stop:
            raise RuntimeError(f"{self.name} broke")


class LoggingPods(InMemoryPodOperations):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        self.log.append("pods.delete_by_selector")
        return super().delete_by_selector(selector, grace_period_seconds=grace_period_seconds)


@dataclass
class BackendRig:
    backend: ExecutorPodsBackend
    allocator: ExecutorPodsAllocator
    pods: LoggingPods
    requests: DeterministicScheduler
    watch: RecordingSource
    poll: RecordingSource
    log: list[str]


def make_backend(*, settings: CoreSettings | None = None, watch_fails: bool = False) -> BackendRig:
    settings = settings or CoreSettings.from_properties({"spark.executor.instances": "3"})
    log: list[str] = []
    store = LoggingStore(log)
    pods = LoggingPods(log)
    clock = ManualClock()
    allocator = ExecutorPodsAllocator(
        settings=settings,
        pod_builder=SimpleExecutorPodBuilder(),
        pod_operations=pods,
        store=store,
        clock=clock,
    )
    lifecycle = ExecutorPodsLifecycleManager(
        settings=settings, pod_operations=pods, store=store, clock=clock
    )
    watch = RecordingSource("watch", log, fail_on_stop=watch_fails)
    poll = RecordingSource("poll", log)
    requests = DeterministicScheduler(clock)
    backend = ExecutorPodsBackend(
        app_id=TEST_APP_ID,
        settings=settings,
        store=store,
        allocator=allocator,
        lifecycle=lifecycle,
        pod_operations=pods,
        driver=RecordingDriver(),
        request_scheduler=requests,
        watch_source=watch,
        poll_source=poll,
        close_client=lambda: log.append("client.close"),
    )
    return BackendRig(backend, allocator, pods, requests, watch, poll, log)


def test_start_all_components_in_the_seed_order() -> None:
    rig = make_backend()
    rig.backend.start()
    assert rig.allocator.total_expected_executors == 3
    assert rig.log == [
        "subscribe ExecutorPodsLifecycleManager",
        "subscribe ExecutorPodsAllocator",
        "watch.start",
        "poll.start",
    ]
    assert rig.watch.started_with == rig.poll.started_with == [TEST_APP_ID]


def test_stop_all_components_in_the_seed_order_even_when_one_fails() -> None:
    rig = make_backend(watch_fails=True)
    rig.backend.start()
    rig.log.clear()
    rig.backend.stop()
    assert rig.log == [
        "store.stop",
        "watch.stop",
        "poll.stop",
        "pods.delete_by_selector",
        "client.close",
    ]
    assert rig.pods.deletes == [DeleteCall(selector=PodSelector(labels=APP_LABELS))]


def test_stop_keeps_the_pods_when_delete_on_termination_is_off() -> None:
    settings = CoreSettings.from_properties(
        {"spark.kubernetes.executor.deleteOnTermination": "false"}
    )
    rig = make_backend(settings=settings)
    rig.backend.stop()
    assert "pods.delete_by_selector" not in rig.log


def test_kill_executors_is_one_delete_by_labels_run_asynchronously() -> None:
    rig = make_backend()
    rig.backend.start()
    future = rig.backend.kill_executors([1, 2])
    assert rig.pods.deletes == [], "nothing happens before the request scheduler runs"
    rig.requests.run_until_idle()
    assert rig.pods.deletes == [
        DeleteCall(
            selector=PodSelector(
                labels=APP_LABELS, label_in={"spark-exec-id": frozenset({"1", "2"})}
            )
        )
    ]
    assert future.result(timeout=0) == 0


def test_request_total_executors_sets_the_target_asynchronously() -> None:
    rig = make_backend()
    rig.backend.start()
    future = rig.backend.request_total_executors(5)
    assert rig.allocator.total_expected_executors == 3
    rig.requests.run_until_idle()
    assert rig.allocator.total_expected_executors == 5
    assert future.done()


def test_a_negative_total_is_refused_before_anything_runs() -> None:
    rig = make_backend()
    with pytest.raises(ValueError, match="negative"):
        rig.backend.request_total_executors(-2)
    assert rig.requests.pending_tasks == 0
