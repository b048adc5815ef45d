"""Spark's KubernetesClusterSchedulerBackendSuite (SPARK-24248): start, stop, kill, request total;
and the backend as the one facade built by the composition root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from execpods.core import (
    CoreSettings,
    DeterministicScheduler,
    ExecutorPod,
    ExecutorPodsBackend,
    ExecutorPodsSnapshot,
    ExecutorRemoval,
    LifecycleObserver,
    Machinery,
    ManualClock,
    NumberedRemoval,
    PodSelector,
    Ports,
    ResourceProfile,
    TotalsRequest,
    compose_backend,
)
from execpods.core.compose import scheduled_store
from execpods.core.labels import ExecutorLabels
from execpods.core.ports import Clock
from execpods.core.states import PodClassifier
from execpods.core.store import ScheduledSnapshotsStore, SnapshotsCallback, Subscription
from execpods.core.testing import (
    TEST_APP_ID,
    DeleteCall,
    DeterministicSnapshotsStore,
    HandFed,
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
    deleted_executor,
    failed_executor,
    pending_executor,
    running_executor,
    succeeded_executor,
)
from hypothesis import given, settings
from hypothesis import strategies as st

APP_LABELS = {"spark-app-selector": TEST_APP_ID, "spark-role": "executor"}


class LoggingStore(DeterministicSnapshotsStore):
    def __init__(
        self, log: list[str], *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock
    ) -> None:
        super().__init__(labels=labels, classifier=classifier, clock=clock)
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
    store: LoggingStore
    pods: LoggingPods
    driver: RecordingDriver
    requests: DeterministicScheduler
    watch: RecordingSource
    poll: RecordingSource
    log: list[str]


def make_backend(
    *,
    settings: CoreSettings | None = None,
    watch_fails: bool = False,
    observers: Sequence[LifecycleObserver] = (),
    driver: RecordingDriver | None = None,
) -> BackendRig:
    """A backend from the composition root, over a logging store, pods and sources."""
    settings = settings or CoreSettings.from_properties({"spark.executor.instances": "3"})
    log: list[str] = []
    stores: list[LoggingStore] = []

    def make_store(
        *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock
    ) -> LoggingStore:
        stores.append(LoggingStore(log, labels=labels, classifier=classifier, clock=clock))
        return stores[-1]

    pods = LoggingPods(log)
    clock = ManualClock()
    watch = RecordingSource("watch", log, fail_on_stop=watch_fails)
    poll = RecordingSource("poll", log)
    requests = DeterministicScheduler(clock)
    driver = driver if driver is not None else RecordingDriver()
    backend = compose_backend(
        app_id=TEST_APP_ID,
        settings=settings,
        ports=Ports(
            pod_operations=pods,
            pod_builder=SimpleExecutorPodBuilder(),
            driver=driver,
            sources=lambda writer: [watch, poll],
            close=lambda: log.append("client.close"),
        ),
        machinery=Machinery(
            observers=observers, clock=clock, store=make_store, request_scheduler=requests
        ),
    )
    return BackendRig(backend, stores[0], pods, driver, requests, watch, poll, log)


def test_start_all_components_in_sparks_order() -> None:
    rig = make_backend()
    rig.backend.start()
    assert rig.backend.counts().total == 3
    assert rig.log == [
        "subscribe ExecutorPodsLifecycleManager",
        "subscribe ExecutorPodsAllocator",
        "watch.start",
        "poll.start",
    ]
    assert rig.watch.started_with == rig.poll.started_with == [TEST_APP_ID]


def test_stop_all_components_in_sparks_order_even_when_one_fails() -> None:
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


def test_request_total_sets_the_target_asynchronously() -> None:
    rig = make_backend()
    rig.backend.start()
    future = rig.backend.request_total(5)
    assert rig.backend.counts().total == 3
    rig.requests.run_until_idle()
    assert rig.backend.counts().total == 5
    assert future.done()


def test_a_negative_total_is_refused_before_anything_runs() -> None:
    rig = make_backend()
    with pytest.raises(ValueError, match="negative"):
        rig.backend.request_total(-2)
    assert rig.requests.pending_tasks == 0


def test_the_total_is_validated_once_at_the_boundary_for_every_profile() -> None:
    rig = make_backend()
    rig.backend.start()
    with pytest.raises(ValueError, match=r"resource profile 1 was never declared"):
        rig.backend.request_total(2, resource_profile_id=1)
    rig.backend.request(TotalsRequest(totals={1: 2}, profiles=(ResourceProfile(id=1, cores=2),)))
    rig.requests.run_until_idle()
    assert rig.backend.counts().total == 5, "the default profile's 3 and profile 1's 2"
    with pytest.raises(
        ValueError, match=r"profile 1: total=-1 is invalid: it must not be negative"
    ):
        rig.backend.request_total(-1, resource_profile_id=1)
    with pytest.raises(ValueError, match="negative"):
        make_backend().backend.start(initial_executors=-1)
    assert rig.requests.pending_tasks == 0
    assert rig.backend.counts().total == 5


def test_counts_are_the_target_and_the_latest_snapshot() -> None:
    rig = make_backend()
    rig.backend.start()
    rig.store.replace_snapshot([running_executor(1), running_executor(2)])
    rig.store.update_pod(failed_executor(3))
    counts = rig.backend.counts()
    assert (counts.total, counts.running, counts.pending) == (3, 2, 0)
    assert rig.backend.current_snapshot is rig.store.current_snapshot


def test_a_subscription_gets_snapshots_and_removals_until_it_is_cancelled() -> None:
    rig = make_backend()
    rig.backend.start()
    snapshots: list[ExecutorPodsSnapshot] = []
    removals: list[ExecutorRemoval] = []
    numbered: list[NumberedRemoval] = []

    def heard(entry: NumberedRemoval) -> None:
        numbered.append(entry)
        removals.append(entry.removal)

    subscription = rig.backend.open_stream(1.0, on_snapshots=snapshots.extend, on_removal=heard)
    assert subscription.start == rig.backend.removal_position
    assert subscription.start.sequence == 0
    assert rig.backend.subscription_count == 1
    rig.store.update_pod(running_executor(1))
    rig.store.update_pod(failed_executor(1, exit_code=137))
    rig.store.notify_subscribers()
    decided_on = rig.store.current_snapshot
    assert snapshots[-1] is decided_on
    assert [(r.executor_id, r.reason.exit_code, r.snapshot_serial) for r in removals] == [
        (1, 137, decided_on.serial)
    ]
    assert rig.driver.removals_of(1) == [removals[0].reason]
    assert [n.sequence for n in numbered] == [1]
    assert rig.backend.removal_position.sequence == 1
    subscription.cancel()
    assert rig.backend.subscription_count == 0
    delivered = len(snapshots)
    rig.store.update_pod(failed_executor(2))
    rig.store.notify_subscribers()
    assert (len(snapshots), len(removals)) == (delivered, 1), "nothing after the cancel"
    assert [i for i, _ in rig.driver.removed] == [1, 2], "the lifecycle manager goes on"


def test_cancelling_releases_the_store_subscription_and_a_stopped_backend_refuses_more() -> None:
    clock = ManualClock()
    fed = HandFed()
    backend = compose_backend(
        app_id=TEST_APP_ID,
        settings=CoreSettings(),
        ports=Ports(
            pod_operations=InMemoryPodOperations(),
            pod_builder=SimpleExecutorPodBuilder(),
            driver=RecordingDriver(),
            sources=fed,
        ),
        machinery=Machinery(
            clock=clock,
            store=scheduled_store(DeterministicScheduler(clock)),
            request_scheduler=DeterministicScheduler(clock),
        ),
    )
    store = fed.writer
    assert isinstance(store, ScheduledSnapshotsStore)
    backend.start()
    reconcilers = store.subscriber_count
    subscription = backend.open_stream(
        1.0, on_snapshots=lambda batch: None, on_removal=lambda removal: None
    )
    assert store.subscriber_count == reconcilers + 1
    subscription.cancel()
    subscription.cancel()  # idempotent
    assert (store.subscriber_count, backend.subscription_count) == (reconcilers, 0)
    backend.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        backend.subscribe(1.0, lambda batch: None)
    with pytest.raises(RuntimeError, match="stopped"):
        backend.open_stream(1.0, on_snapshots=lambda batch: None, on_removal=lambda r: None)
    assert backend.subscription_count == 0


@dataclass
class RecordingObserver:
    """A lifecycle observer that notes what the driver had been told when it heard each report."""

    driver: RecordingDriver
    heard: list[tuple[str, object, list[int]]] = field(default_factory=list)
    fail: bool = False

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        told = [i for i, _ in self.driver.removed]
        self.heard.append(("round", [s.serial for s in snapshots], told))
        if self.fail:
            raise RuntimeError("observer broke")

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        told = [i for i, _ in self.driver.removed]
        self.heard.append(("removed", removal.executor_id, told))
        if self.fail:
            raise RuntimeError("observer broke")

    def application_failed(self, message: str) -> None:
        self.heard.append(("failed", message, [i for i, _ in self.driver.removed]))


def test_observers_hear_each_round_before_its_decisions_and_each_removal_after_the_driver() -> None:
    driver = RecordingDriver()
    first, second = RecordingObserver(driver, fail=True), RecordingObserver(driver)
    rig = make_backend(observers=[first, second], driver=driver)
    rig.backend.start()
    removals: list[ExecutorRemoval] = []
    rig.backend.open_stream(
        1.0, on_snapshots=lambda batch: None, on_removal=lambda n: removals.append(n.removal)
    )
    rig.store.update_pod(failed_executor(4))
    rig.store.notify_subscribers()
    serial = rig.store.current_snapshot.serial
    expected = [("round", [serial], []), ("removed", 4, [4])]
    assert first.heard == second.heard == expected, "a failing observer stops no one"
    assert [r.executor_id for r in removals] == [4]


_FACTORIES = (
    pending_executor,
    running_executor,
    failed_executor,
    succeeded_executor,
    deleted_executor,
)
_POD = st.builds(lambda i, k: _FACTORIES[k](i), st.integers(1, 6), st.integers(0, 4))
_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("update"), _POD),
        st.tuples(st.just("update"), _POD),
        st.tuples(st.just("notify"), st.none()),
        st.tuples(st.just("replace"), st.lists(_POD, max_size=6)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(actions=_ACTIONS, known=st.sets(st.integers(1, 6)))
def test_every_removal_names_a_snapshot_that_shows_why(
    actions: list[tuple[str, object]], known: set[int]
) -> None:
    """Whatever the event order: a subscriber hears each removal once, as the driver does, and
    the snapshot it names (which the subscriber also gets) shows the executor final, or absent
    when the driver knew it and its pod vanished."""
    rig = make_backend(driver=RecordingDriver(known=set(known)))
    rig.backend.start()
    snapshots: list[ExecutorPodsSnapshot] = []
    removals: list[ExecutorRemoval] = []
    rig.backend.open_stream(
        1.0, on_snapshots=snapshots.extend, on_removal=lambda n: removals.append(n.removal)
    )
    for kind, arg in actions:
        if kind == "update":
            assert isinstance(arg, ExecutorPod)
            rig.store.update_pod(arg)
        elif kind == "replace":
            assert isinstance(arg, list)
            rig.store.replace_snapshot(arg)
        else:
            rig.store.notify_subscribers()
    rig.store.notify_subscribers()
    assert [r.executor_id for r in removals] == [i for i, _ in rig.driver.removed]
    assert [r.reason for r in removals] == [reason for _, reason in rig.driver.removed]
    assert len({r.executor_id for r in removals}) == len(removals), "each removal once"
    by_serial = {snapshot.serial: snapshot for snapshot in snapshots}
    for removal in removals:
        shown = by_serial[removal.snapshot_serial].executor_pods.get(removal.executor_id)
        if shown is None:
            assert removal.executor_id in known
            assert removal.reason.exit_code == -1
        else:
            assert shown.is_final, (removal, shown.state)
